// hf_config.h - HF config.json <-> ModelConfig: the ONE reader of config.json, and the writer of
// the exported one.
//
// Every path that takes a checkpoint (rlrun CONFIG through load_config's registered reader,
// validate, plan, tune, generate, serve, convert, the trainer, the rollout worker and the export)
// reads its config.json here, so each gets the same verdict.
//
// Supported: LlamaForCausalLM (Llama 1-3.x, SmolLM2), Qwen2ForCausalLM (Qwen2/2.5),
// Qwen3ForCausalLM and Gemma3ForCausalLM (text), in the config.json of transformers 4.x
// (`rope_theta`, `rope_scaling`) and 5.x (`rope_parameters`, `layer_types`, `dtype`). The reader
// decides by an ALLOW-LIST (hf_config_fields()): a top-level field it does not know is refused
// naming the field and its value, and a known field whose value would change the math in a way
// the engine does not implement (a new rope type, softcapping, MoE, attention biases) is refused
// naming the field, the value and what is supported. Nothing is silently ignored: the fields that
// are ignored are listed with the reason they cannot change what the model computes.
//
// Loading and saving whole checkpoint directories: hf_checkpoint.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/config.h"

namespace rlrun::engine {

// Parses config.json text; `source` names it in messages. Validates the shape (positive sizes,
// num_heads % num_kv_heads == 0, even head_dim, ...) and refuses what the engine cannot compute.
Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& source);
Result<ModelConfig> read_hf_config(const std::string& path);

// config.json text for `config`, in the form transformers 4.46 and 5.x both read as the same model
// (`rope_theta` + `rope_scaling`, which 5.x converts to `rope_parameters`; `layer_types`; the
// architecture's class in `architectures`). `torch_dtype` is "float32" or "bfloat16" (what the
// weights are stored as). Errors for a config HF cannot express (llama with qkv_bias, ...).
Result<std::string> hf_config_json(const ModelConfig& config, const std::string& torch_dtype);

// Checks a ModelConfig (also those that do not come from JSON: YAML, GGUF): positive sizes, head
// counts that divide, an even head_dim, a known architecture, activation and rope type, layer_types
// of the right length.
Status validate_model_config(const ModelConfig& config);

// What an HF config.json field is to rlrun (docs/models.md lists them all).
enum class HfFieldUse {
  kRead,     // read into ModelConfig (values the engine does not implement are refused)
  kIgnored,  // cannot change what the model computes; `why` says why
  kRefused,  // always refused when present and not null/false/0/empty (MoE, quantization, ...)
};
struct HfConfigField {
  std::string_view name;
  HfFieldUse use;
  std::string_view why;  // what is read or supported, or why it is ignored or refused
};
// Every top-level config.json field rlrun knows, in a fixed order. Anything else is refused.
std::span<const HfConfigField> hf_config_fields();

// One named parameter with its shape; torch Linear weights are (out_features, in_features).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Every parameter of the model in HF naming, in the order of parameter_layout() (model/weights.h):
// embed_tokens, then per layer input_layernorm, q (bias), k (bias), v (bias), q_norm, k_norm, o,
// the post-attention norms, gate/up/down (and post_feedforward_layernorm), then model.norm and
// lm_head (absent when tied). The model, checkpoint IO and weight sync all use this list.
std::vector<TensorSpec> hf_tensor_specs(const ModelConfig& config);

}  // namespace rlrun::engine
