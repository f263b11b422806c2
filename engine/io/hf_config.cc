#include "engine/io/hf_config.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::engine {
namespace {

using Json = nlohmann::json;

// Upper bound for any size in config.json: keeps every shape product far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;

Result<int64_t> get_int(const Json& j, const std::string& key, const std::string& source,
                        std::optional<int64_t> fallback, int64_t min_value = 1) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    return invalid_argument(str(source, ": missing required key `", key, "`"));
  }
  const Json& v = j[key];
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxDim)) ||
      v.get<int64_t>() < min_value || v.get<int64_t>() > kMaxDim) {
    return invalid_argument(str(source, ": `", key, "` must be an integer in [", min_value, ", ", kMaxDim,
                                "], got ", v.dump()));
  }
  return v.get<int64_t>();
}

Result<double> get_positive_number(const Json& j, const std::string& key, const std::string& source,
                                   double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const Json& v = j[key];
  if (!v.is_number() || !(v.get<double>() > 0.0) || v.get<double>() == std::numeric_limits<double>::infinity()) {
    return invalid_argument(str(source, ": `", key, "` must be a positive number, got ", v.dump()));
  }
  return v.get<double>();
}

Result<bool> get_bool(const Json& j, const std::string& key, const std::string& source, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) return invalid_argument(str(source, ": `", key, "` must be true or false"));
  return j[key].get<bool>();
}

// A token id: absent/null -> -1; a list (Llama 3 style) -> its first entry.
Result<int64_t> get_token_id(const Json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return int64_t{-1};
  const Json& v = j[key].is_array() && !j[key].empty() ? j[key][0] : j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxDim) {
    return invalid_argument(str(source, ": `", key, "` must be a token id, got ", j[key].dump()));
  }
  return v.get<int64_t>();
}

Result<std::string> architecture_of(const Json& j, const std::string& source) {
  std::string name;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    name = j["architectures"][0].get<std::string>();
    if (name == "LlamaForCausalLM") return std::string("llama");
    if (name == "Qwen2ForCausalLM") return std::string("qwen2");
    return invalid_argument(str(source, ": `architectures` is ", name,
                                "; supported: LlamaForCausalLM, Qwen2ForCausalLM"));
  }
  if (j.contains("model_type") && j["model_type"].is_string()) {
    name = j["model_type"].get<std::string>();
    if (name == "llama" || name == "qwen2") return name;
  }
  return invalid_argument(str(source, ": cannot tell the architecture: `architectures` (LlamaForCausalLM or ",
                              "Qwen2ForCausalLM) or `model_type` (llama or qwen2) is missing or unsupported",
                              name.empty() ? "" : str(" (got ", name, ")")));
}

// Features that change the computation and that the engine does not implement.
Status check_unsupported(const Json& j, const ModelConfig& c, const std::string& source) {
  auto refuse = [&](const std::string& key, const std::string& why) {
    return invalid_argument(str(source, ": `", key, "` = ", j[key].dump(), " is not supported (", why, ")"));
  };
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") return refuse("hidden_act", "only silu");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) return refuse("rope_scaling", "only plain RoPE");
  if (j.contains("head_dim") && !j["head_dim"].is_null() && j["head_dim"] != c.head_dim()) {
    return refuse("head_dim", str("must equal hidden_size / num_attention_heads = ", c.head_dim()));
  }
  if (j.contains("use_sliding_window") && j["use_sliding_window"] != false) {
    return refuse("use_sliding_window", "only full attention");
  }
  if (j.contains("attention_bias") && j["attention_bias"] != false) {
    return refuse("attention_bias", "llama's bias on q/k/v/o projections is not implemented");
  }
  if (j.contains("mlp_bias") && j["mlp_bias"] != false) return refuse("mlp_bias", "the MLP has no biases");
  return Status();
}

}  // namespace

Status validate_model_config(const ModelConfig& c) {
  if (c.architecture != "llama" && c.architecture != "qwen2") {
    return invalid_argument(str("model architecture `", c.architecture, "` is not supported (llama or qwen2)"));
  }
  for (auto [name, v] : {std::pair<const char*, int64_t>{"hidden_size", c.hidden_size}, {"num_layers", c.num_layers},
                         {"num_heads", c.num_heads}, {"num_kv_heads", c.num_kv_heads},
                         {"intermediate_size", c.intermediate_size}, {"vocab_size", c.vocab_size},
                         {"max_position", c.max_position}}) {
    if (v < 1 || v > kMaxDim) return invalid_argument(str("model ", name, " = ", v, " must be in [1, ", kMaxDim, "]"));
  }
  if (c.hidden_size % c.num_heads != 0) {
    return invalid_argument(str("model hidden_size ", c.hidden_size, " is not a multiple of num_heads ", c.num_heads));
  }
  if (c.head_dim() % 2 != 0) {  // RoPE rotates pairs of dimensions
    return invalid_argument(str("model head_dim ", c.head_dim(), " (hidden_size / num_heads) must be even"));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument(str("model num_heads ", c.num_heads, " is not a multiple of num_kv_heads ", c.num_kv_heads));
  }
  if (!(c.rope_theta > 0) || !(c.rms_norm_eps > 0)) {
    return invalid_argument("model rope_theta and rms_norm_eps must be positive");
  }
  return Status();
}

Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& source) {
  const Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(str(source, ": not a valid JSON object"));
  ModelConfig c;
  RLRUN_ASSIGN_OR_RETURN(c.architecture, architecture_of(j, source));
  RLRUN_ASSIGN_OR_RETURN(c.hidden_size, get_int(j, "hidden_size", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.num_layers, get_int(j, "num_hidden_layers", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.num_heads, get_int(j, "num_attention_heads", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.num_kv_heads, get_int(j, "num_key_value_heads", source, c.num_heads));
  RLRUN_ASSIGN_OR_RETURN(c.intermediate_size, get_int(j, "intermediate_size", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.vocab_size, get_int(j, "vocab_size", source, std::nullopt));
  const int64_t default_positions = c.architecture == "qwen2" ? 32768 : 2048;  // HF's defaults
  RLRUN_ASSIGN_OR_RETURN(c.max_position, get_int(j, "max_position_embeddings", source, default_positions));
  RLRUN_ASSIGN_OR_RETURN(c.rope_theta, get_positive_number(j, "rope_theta", source, 10000.0));
  RLRUN_ASSIGN_OR_RETURN(c.rms_norm_eps, get_positive_number(j, "rms_norm_eps", source, 1e-6));
  RLRUN_ASSIGN_OR_RETURN(c.tie_embeddings, get_bool(j, "tie_word_embeddings", source, false));
  RLRUN_ASSIGN_OR_RETURN(c.bos_token_id, get_token_id(j, "bos_token_id", source));
  RLRUN_ASSIGN_OR_RETURN(c.eos_token_id, get_token_id(j, "eos_token_id", source));
  c.qkv_bias = c.architecture == "qwen2";
  Status valid = validate_model_config(c);
  if (!valid.ok()) return valid.with_context(source);
  RLRUN_RETURN_IF_ERROR(check_unsupported(j, c, source));
  return c;
}

Result<ModelConfig> read_hf_config(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(path, "HF config"));
  return parse_hf_config(text, path);
}

Result<std::string> hf_config_json(const ModelConfig& c, const std::string& torch_dtype) {
  RLRUN_RETURN_IF_ERROR(validate_model_config(c));
  const bool qwen2 = c.architecture == "qwen2";
  if (c.qkv_bias != qwen2) {
    return invalid_argument(str("model architecture ", c.architecture, " with qkv_bias=", c.qkv_bias,
                                " has no HF equivalent (qwen2 always has q/k/v biases, llama never)"));
  }
  nlohmann::ordered_json j;
  j["architectures"] = {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = c.architecture;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_heads;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["vocab_size"] = c.vocab_size;
  j["bos_token_id"] = c.bos_token_id >= 0 ? Json(c.bos_token_id) : Json(nullptr);
  j["eos_token_id"] = c.eos_token_id >= 0 ? Json(c.eos_token_id) : Json(nullptr);
  if (qwen2) {
    j["use_sliding_window"] = false;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

std::vector<TensorSpec> hf_tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, kv = c.num_kv_heads * c.head_dim(), ff = c.intermediate_size;
  std::vector<TensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = str("model.layers.", i, ".");
    specs.push_back({p + "input_layernorm.weight", {h}});
    specs.push_back({p + "self_attn.q_proj.weight", {h, h}});
    specs.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    specs.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    if (c.qkv_bias) {
      specs.push_back({p + "self_attn.q_proj.bias", {h}});
      specs.push_back({p + "self_attn.k_proj.bias", {kv}});
      specs.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {h, h}});
    specs.push_back({p + "post_attention_layernorm.weight", {h}});
    specs.push_back({p + "mlp.gate_proj.weight", {ff, h}});
    specs.push_back({p + "mlp.up_proj.weight", {ff, h}});
    specs.push_back({p + "mlp.down_proj.weight", {h, ff}});
  }
  specs.push_back({"model.norm.weight", {h}});
  if (!c.tie_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, h}});
  return specs;
}

}  // namespace rlrun::engine
