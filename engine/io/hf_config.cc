// hf_config.cc - config.json -> ModelConfig (hf_config.h): the architecture, the sizes, the
// allow-list check, and everything but RoPE (hf_config_rope.cc).
#include "engine/io/hf_config.h"

#include <cmath>
#include <limits>
#include <set>

#include "common/file_io.h"
#include "common/observe/log.h"
#include "engine/io/hf_config_internal.h"

namespace rlrun::engine {
namespace hf {

bool absent(const Json& j, const std::string& key) { return !j.contains(key) || j[key].is_null(); }

Result<int64_t> get_int(const Json& j, const std::string& key, const std::string& source,
                        std::optional<int64_t> fallback, int64_t min_value) {
  if (absent(j, key)) {
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
  if (absent(j, key)) return fallback;
  const Json& v = j[key];
  if (!v.is_number() || !(v.get<double>() > 0.0) || v.get<double>() == std::numeric_limits<double>::infinity()) {
    return invalid_argument(str(source, ": `", key, "` must be a positive number, got ", v.dump()));
  }
  return v.get<double>();
}

Result<bool> get_bool(const Json& j, const std::string& key, const std::string& source, bool fallback) {
  if (absent(j, key)) return fallback;
  if (!j[key].is_boolean()) return invalid_argument(str(source, ": `", key, "` must be true or false"));
  return j[key].get<bool>();
}

Status refuse(const std::string& source, const std::string& key, const Json& value, const std::string& supported) {
  return invalid_argument(str(source, ": `", key, "` = ", value.dump(), " is not supported (", supported, ")"));
}

}  // namespace hf

namespace {

using hf::absent;
using hf::Json;
using hf::kMaxDim;
using hf::refuse;

// A token id, or -1 when absent/null.
Result<int64_t> token_id(const Json& v, const std::string& key, const std::string& source) {
  if (v.is_null()) return int64_t{-1};
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxDim)
    return invalid_argument(str(source, ": `", key, "` must be a token id, got ", v.dump()));
  return v.get<int64_t>();
}

// eos_token_id: an id or a list of them (Llama 3 Instruct, Gemma 3).
Status read_eos(const Json& j, const std::string& source, ModelConfig& c) {
  c.eos_token_id = -1;
  c.extra_eos_token_ids.clear();
  if (absent(j, "eos_token_id")) return Status();
  const Json& v = j["eos_token_id"];
  if (!v.is_array()) {
    RLRUN_ASSIGN_OR_RETURN(c.eos_token_id, token_id(v, "eos_token_id", source));
    return Status();
  }
  for (const Json& id : v) {
    RLRUN_ASSIGN_OR_RETURN(const int64_t t, token_id(id, "eos_token_id", source));
    if (t < 0) continue;
    if (c.eos_token_id < 0) c.eos_token_id = t;
    else c.extra_eos_token_ids.push_back(t);
  }
  return Status();
}

struct ArchitectureName {
  const char* cls;
  const char* model_type;
  const char* architecture;
};
constexpr ArchitectureName kArchitectures[] = {{"LlamaForCausalLM", "llama", "llama"},
                                               {"Qwen2ForCausalLM", "qwen2", "qwen2"},
                                               {"Qwen3ForCausalLM", "qwen3", "qwen3"},
                                               {"Gemma3ForCausalLM", "gemma3_text", "gemma3"}};
constexpr char kSupported[] = "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM";

Result<std::string> architecture_of(const Json& j, const std::string& source) {
  if (j.contains("text_config") || j.contains("vision_config"))
    return invalid_argument(str(source, ": a multimodal checkpoint (`text_config`/`vision_config`) is not supported; "
                                        "use a text-only one (", kSupported, ")"));
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string name = j["architectures"][0].get<std::string>();
    for (const ArchitectureName& a : kArchitectures)
      if (name == a.cls) return std::string(a.architecture);
    return refuse(source, "architectures", j["architectures"], str("supported: ", kSupported));
  }
  if (j.contains("model_type") && j["model_type"].is_string()) {
    const std::string name = j["model_type"].get<std::string>();
    for (const ArchitectureName& a : kArchitectures)
      if (name == a.model_type) return std::string(a.architecture);
    return refuse(source, "model_type", j["model_type"], "supported: llama, qwen2, qwen3, gemma3_text");
  }
  return invalid_argument(str(source, ": cannot tell the architecture: `architectures` (", kSupported,
                              ") and `model_type` are missing"));
}

// A field that is present (not null) and not `fine` for this model: refused naming it.
Status require_value(const Json& j, const std::string& source, const std::string& key, const Json& fine,
                     const std::string& supported) {
  if (absent(j, key) || j[key] == fine) return Status();
  if (fine.is_number() && j[key].is_number() && j[key].get<double>() == fine.get<double>()) return Status();
  return refuse(source, key, j[key], supported);
}

// Every top-level field must be one hf_config_fields() lists; refused ones must be null/empty.
Status check_allow_list(const Json& j, const std::string& source) {
  for (const auto& [key, value] : j.items()) {
    const HfConfigField* field = nullptr;
    for (const HfConfigField& f : hf_config_fields())
      if (f.name == key) field = &f;
    if (field == nullptr)
      return invalid_argument(str(source, ": `", key, "` = ", value.dump(), " is a config.json field rlrun does not ",
                                  "know; it may change what the model computes, so the checkpoint is refused ",
                                  "(docs/models.md lists the supported fields)"));
    const bool empty = value.is_null() || value == false || value == 0 || (value.is_array() && value.empty()) ||
                       (value.is_object() && value.empty());
    if (field->use == HfFieldUse::kRefused && !empty)
      return refuse(source, key, value, std::string(field->why));
  }
  return Status();
}

Status read_activation(const Json& j, const std::string& source, ModelConfig& c) {
  const bool gemma = c.architecture == "gemma3";
  c.hidden_act = gemma ? "gelu_pytorch_tanh" : "silu";
  const std::string supported = gemma ? "gemma3: gelu_pytorch_tanh" : str(c.architecture, ": silu");
  RLRUN_RETURN_IF_ERROR(require_value(j, source, "hidden_act", Json(c.hidden_act), supported));
  return require_value(j, source, "hidden_activation", Json(c.hidden_act), supported);
}

// layer_types, sliding_window (gemma3), or Qwen's use_sliding_window (refused).
Status read_attention_pattern(const Json& j, const std::string& source, ModelConfig& c) {
  const bool gemma = c.architecture == "gemma3";
  c.layer_types.clear();
  c.sliding_window = 0;
  if (!gemma) {
    RLRUN_RETURN_IF_ERROR(require_value(j, source, "use_sliding_window", Json(false), "only gemma3 has sliding layers"));
    if (c.architecture == "llama")
      RLRUN_RETURN_IF_ERROR(require_value(j, source, "sliding_window", Json(nullptr), "llama has no sliding window"));
    for (const char* k : {"sliding_window_pattern", "_sliding_window_pattern", "query_pre_attn_scalar"})
      if (!absent(j, k)) return refuse(source, k, j[k], "a gemma3 field");
  }
  if (!absent(j, "layer_types")) {
    const Json& t = j["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != c.num_layers)
      return invalid_argument(str(source, ": `layer_types` must list one entry per layer (", c.num_layers, ")"));
    for (const Json& e : t) {
      if (e != "full_attention" && (e != "sliding_attention" || !gemma))
        return refuse(source, "layer_types", e, gemma ? "full_attention or sliding_attention"
                                                      : "full_attention (sliding layers only for gemma3)");
      c.layer_types.push_back(e.get<std::string>());
    }
  }
  if (!gemma) {
    c.layer_types.clear();  // all full
    return Status();
  }
  RLRUN_ASSIGN_OR_RETURN(c.sliding_window, hf::get_int(j, "sliding_window", source, 4096));
  if (c.layer_types.empty()) {  // transformers < 4.55: every pattern-th layer is global
    const std::string key = j.contains("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    RLRUN_ASSIGN_OR_RETURN(const int64_t pattern, hf::get_int(j, key, source, 6));
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
  }
  RLRUN_ASSIGN_OR_RETURN(const double scalar, hf::get_positive_number(j, "query_pre_attn_scalar", source, 256.0));
  c.query_pre_attn_scalar = scalar;
  return Status();
}

// The fields that must keep their harmless value.
Status check_math_fields(const Json& j, const std::string& source, const ModelConfig& c) {
  if (c.architecture != "qwen2")
    RLRUN_RETURN_IF_ERROR(require_value(j, source, "attention_bias", Json(false), "false: attention biases are not implemented"));
  RLRUN_RETURN_IF_ERROR(require_value(j, source, "mlp_bias", Json(false), "false: MLP biases are not implemented"));
  RLRUN_RETURN_IF_ERROR(require_value(j, source, "attention_dropout", Json(0.0), "0: rlrun trains without dropout"));
  RLRUN_RETURN_IF_ERROR(require_value(j, source, "partial_rotary_factor", Json(1.0), "1: RoPE over whole heads"));
  RLRUN_RETURN_IF_ERROR(require_value(j, source, "attn_logit_softcapping", Json(nullptr), "null: no softcapping"));
  RLRUN_RETURN_IF_ERROR(require_value(j, source, "final_logit_softcapping", Json(nullptr), "null: no softcapping"));
  return require_value(j, source, "use_bidirectional_attention", Json(false), "false: the decoder is causal");
}

Result<std::string> dtype_of(const Json& j, const std::string& source) {
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (absent(j, key)) continue;
    if (!j[key].is_string()) return invalid_argument(str(source, ": `", key, "` must be a string, got ", j[key].dump()));
    return j[key].get<std::string>();
  }
  return std::string();
}

Status read_sizes(const Json& j, const std::string& source, ModelConfig& c) {
  RLRUN_ASSIGN_OR_RETURN(c.hidden_size, hf::get_int(j, "hidden_size", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.num_layers, hf::get_int(j, "num_hidden_layers", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.num_heads, hf::get_int(j, "num_attention_heads", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.num_kv_heads, hf::get_int(j, "num_key_value_heads", source, c.num_heads));
  RLRUN_ASSIGN_OR_RETURN(c.intermediate_size, hf::get_int(j, "intermediate_size", source, std::nullopt));
  RLRUN_ASSIGN_OR_RETURN(c.vocab_size, hf::get_int(j, "vocab_size", source, std::nullopt));
  // transformers' defaults: qwen3 128, gemma3 256, else hidden_size / num_attention_heads.
  const int64_t default_head_dim = c.architecture == "qwen3" ? 128 : c.architecture == "gemma3" ? 256 : 0;
  RLRUN_ASSIGN_OR_RETURN(c.explicit_head_dim, hf::get_int(j, "head_dim", source, default_head_dim));
  if (c.architecture == "qwen2" && c.explicit_head_dim > 0 && c.explicit_head_dim * c.num_heads != c.hidden_size)
    return refuse(source, "head_dim", j["head_dim"], "qwen2: hidden_size / num_attention_heads; transformers 4.x "
                                                     "ignores head_dim there and 5.x does not");
  // HF's defaults where a field may be left out.
  const int64_t default_positions = c.architecture == "llama" ? 2048 : c.architecture == "gemma3" ? 131072 : 32768;
  RLRUN_ASSIGN_OR_RETURN(c.max_position, hf::get_int(j, "max_position_embeddings", source, default_positions));
  RLRUN_ASSIGN_OR_RETURN(c.rms_norm_eps, hf::get_positive_number(j, "rms_norm_eps", source, 1e-6));
  RLRUN_ASSIGN_OR_RETURN(c.tie_embeddings, hf::get_bool(j, "tie_word_embeddings", source, c.architecture == "gemma3"));
  return Status();
}

}  // namespace

Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& source) {
  const Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(str(source, ": not a valid JSON object"));
  RLRUN_ASSIGN_OR_RETURN(const std::string architecture, architecture_of(j, source));
  RLRUN_RETURN_IF_ERROR(check_allow_list(j, source));
  ModelConfig c = architecture_config(architecture);
  RLRUN_RETURN_IF_ERROR(read_sizes(j, source, c));
  RLRUN_RETURN_IF_ERROR(read_activation(j, source, c));
  RLRUN_RETURN_IF_ERROR(read_attention_pattern(j, source, c));
  RLRUN_RETURN_IF_ERROR(hf::read_rope(j, source, c));
  RLRUN_RETURN_IF_ERROR(check_math_fields(j, source, c));
  RLRUN_ASSIGN_OR_RETURN(c.bos_token_id, token_id(absent(j, "bos_token_id") ? Json() : j["bos_token_id"],
                                                  "bos_token_id", source));
  RLRUN_ASSIGN_OR_RETURN(c.pad_token_id, token_id(absent(j, "pad_token_id") ? Json() : j["pad_token_id"],
                                                  "pad_token_id", source));
  RLRUN_RETURN_IF_ERROR(read_eos(j, source, c));
  RLRUN_ASSIGN_OR_RETURN(c.torch_dtype, dtype_of(j, source));
  if (c.architecture == "gemma3") c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));
  Status valid = validate_model_config(c);
  if (!valid.ok()) return valid.with_context(source);
  return c;
}

Result<ModelConfig> read_hf_config(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(path, "HF config"));
  return parse_hf_config(text, path);
}

}  // namespace rlrun::engine
