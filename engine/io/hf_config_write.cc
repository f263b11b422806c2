// hf_config_write.cc - ModelConfig -> the exported config.json, and the HF tensor list
// (hf_config.h).
//
// The export is written in transformers 4.x form (`rope_theta`, `rope_scaling`,
// `rope_local_base_freq`, `torch_dtype`) plus `layer_types`: transformers 5 converts those keys
// into its `rope_parameters` when it loads them, so 4.46 (llama, qwen2) and 5.x read one model.
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/observe/log.h"
#include "engine/io/hf_config.h"
#include "engine/model/weights.h"

namespace rlrun::engine {
namespace {

using OJson = nlohmann::ordered_json;

const char* class_of(const std::string& architecture) {
  if (architecture == "qwen2") return "Qwen2ForCausalLM";
  if (architecture == "qwen3") return "Qwen3ForCausalLM";
  if (architecture == "gemma3") return "Gemma3ForCausalLM";
  return "LlamaForCausalLM";
}

// The architecture's fixed math must be what `c` holds, or HF would load another model.
Status check_expressible(const ModelConfig& c) {
  const ModelConfig a = architecture_config(c.architecture);
  if (c.qkv_bias != a.qkv_bias || c.qk_norm != a.qk_norm || c.hidden_act != a.hidden_act ||
      c.norm_weight_offset != a.norm_weight_offset || c.sandwich_norms != a.sandwich_norms) {
    return invalid_argument(str("model architecture ", c.architecture, " with qkv_bias=", c.qkv_bias, ", qk_norm=",
                                c.qk_norm, ", hidden_act=", c.hidden_act, ", norm offset ", c.norm_weight_offset,
                                ", sandwich_norms=", c.sandwich_norms, " has no HF equivalent"));
  }
  if (c.architecture == "qwen2" && c.explicit_head_dim > 0 && c.head_dim() * c.num_heads != c.hidden_size)
    return invalid_argument("model qwen2 with head_dim != hidden_size / num_heads has no HF equivalent");
  if (c.architecture != "gemma3" && (c.has_sliding_layers() || c.query_pre_attn_scalar > 0 || c.embedding_scale != 1))
    return invalid_argument(str("model ", c.architecture, " with sliding layers, a query scalar or an embedding scale "
                                                          "has no HF equivalent"));
  return Status();
}

OJson rope_scaling_json(const RopeScaling& s) {
  if (s.type == "default") return nullptr;
  OJson r;
  r["rope_type"] = s.type;
  r["factor"] = s.factor;
  if (s.type == "llama3") {
    r["low_freq_factor"] = s.low_freq_factor;
    r["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == "llama3" || s.type == "yarn") r["original_max_position_embeddings"] = s.original_max_position;
  if (s.type == "yarn") {
    r["beta_fast"] = s.beta_fast;
    r["beta_slow"] = s.beta_slow;
    r["attention_factor"] = s.attention_factor;
    if (!s.truncate) r["truncate"] = false;
  }
  return r;
}

OJson token_json(int64_t id) { return id >= 0 ? OJson(id) : OJson(nullptr); }

// Gemma's sliding pattern as transformers < 4.55 wrote it (every N-th layer global), when it is one.
int64_t sliding_pattern_of(const ModelConfig& c) {
  for (int64_t n = 1; n <= c.num_layers + 1; ++n) {
    bool fits = true;
    for (int64_t i = 0; i < c.num_layers && fits; ++i) fits = c.is_sliding(i) == ((i + 1) % n != 0);
    if (fits) return n;
  }
  return 0;
}

void write_attention_pattern(const ModelConfig& c, OJson& j) {
  if (c.architecture != "gemma3") {
    if (c.architecture != "llama") {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
    }
    return;
  }
  // transformers 5's Gemma3TextConfig is strict: an int (every Gemma 3 has one).
  const double scalar = c.query_pre_attn_scalar;
  j["query_pre_attn_scalar"] = scalar == std::floor(scalar) ? OJson(static_cast<int64_t>(scalar)) : OJson(scalar);
  j["sliding_window"] = c.sliding_window > 0 ? OJson(c.sliding_window) : OJson(4096);
  OJson types = OJson::array();
  for (int64_t i = 0; i < c.num_layers; ++i) types.push_back(c.is_sliding(i) ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  if (const int64_t pattern = sliding_pattern_of(c); pattern > 0) j["sliding_window_pattern"] = pattern;
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["use_bidirectional_attention"] = false;
}

}  // namespace

Result<std::string> hf_config_json(const ModelConfig& c, const std::string& torch_dtype) {
  RLRUN_RETURN_IF_ERROR(validate_model_config(c));
  RLRUN_RETURN_IF_ERROR(check_expressible(c));
  OJson j;
  j["architectures"] = {class_of(c.architecture)};
  j["model_type"] = c.architecture == "gemma3" ? "gemma3_text" : c.architecture;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_attention_heads"] = c.num_heads;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = c.num_kv_heads;
  if (c.explicit_head_dim > 0 || c.architecture == "qwen3" || c.architecture == "gemma3")
    j["head_dim"] = c.head_dim();  // qwen3's and gemma3's defaults are not hidden_size / heads
  j[c.architecture == "gemma3" ? "hidden_activation" : "hidden_act"] = c.hidden_act;
  j["max_position_embeddings"] = c.max_position;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
  if (c.architecture == "gemma3") j["rope_local_base_freq"] = c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta;
  write_attention_pattern(c, j);
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["vocab_size"] = c.vocab_size;
  j["bos_token_id"] = token_json(c.bos_token_id);
  if (c.extra_eos_token_ids.empty()) {
    j["eos_token_id"] = token_json(c.eos_token_id);
  } else {
    OJson eos = OJson::array({c.eos_token_id});
    for (int64_t id : c.extra_eos_token_ids) eos.push_back(id);
    j["eos_token_id"] = eos;
  }
  j["pad_token_id"] = token_json(c.pad_token_id);
  if (c.architecture != "qwen2") j["attention_bias"] = false;
  if (c.architecture == "llama") j["mlp_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

std::vector<TensorSpec> hf_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  for (const ParamInfo& p : parameter_layout(c))
    specs.push_back({p.name, std::vector<int64_t>(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank)});
  return specs;
}

}  // namespace rlrun::engine
