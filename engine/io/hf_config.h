// hf_config.h - HF config.json <-> ModelConfig, and the HF name and shape of every parameter.
//
// Supported: LlamaForCausalLM and Qwen2ForCausalLM in their plain form (SiLU MLP, default RoPE,
// head_dim = hidden_size / num_attention_heads, full attention). Anything else is refused with a
// message naming the config.json key, rather than loaded into a model that would compute
// something different.
//
// Loading and saving whole checkpoint directories: hf_checkpoint.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model/config.h"

namespace rlrun::engine {

// Parses config.json text; `source` names it in messages. Validates the shape (positive sizes,
// num_heads % num_kv_heads == 0, hidden_size % num_heads == 0).
Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& source);
Result<ModelConfig> read_hf_config(const std::string& path);

// config.json text for `config` (architectures, model_type, sizes, ...). `torch_dtype` is
// "float32" or "bfloat16" (what the weights are stored as). Errors for a config HF cannot express
// (llama with qkv_bias, qwen2 without).
Result<std::string> hf_config_json(const ModelConfig& config, const std::string& torch_dtype);

// Checks the shape fields of a ModelConfig (also used for configs that do not come from JSON).
Status validate_model_config(const ModelConfig& config);

// One named parameter with its shape; torch Linear weights are (out_features, in_features).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Every parameter of the model in HF naming, in a fixed order: embed_tokens, then per layer
// input_layernorm, q/k/v(/biases)/o, post_attention_layernorm, gate/up/down, then model.norm and
// lm_head (absent when tied). The model, checkpoint IO and weight sync all use this list.
std::vector<TensorSpec> hf_tensor_specs(const ModelConfig& config);

}  // namespace rlrun::engine
