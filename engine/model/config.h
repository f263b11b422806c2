// model/config.h - the shape of a Llama-family decoder (Llama, Qwen2, SmolLM2).
//
// Filled from the config's `model:` section or from an HF `config.json`; the engine knows nothing
// of YAML. Names follow HF's config.json where one exists.
#pragma once

#include <cstdint>
#include <string>

namespace rlrun::engine {

struct ModelConfig {
  std::string architecture = "llama";  // "llama" or "qwen2" (qwen2: biases on q/k/v projections)
  int64_t hidden_size = 256;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 4;            // grouped-query attention: num_heads % num_kv_heads == 0
  int64_t intermediate_size = 688;
  int64_t vocab_size = 512;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = false;         // lm_head shares the embedding table
  bool qkv_bias = false;               // true for qwen2
  int64_t max_position = 2048;
  int64_t bos_token_id = -1;           // -1: none
  int64_t eos_token_id = -1;

  int64_t head_dim() const { return hidden_size / num_heads; }
  // Parameters of the whole model (embedding counted once when tied).
  int64_t num_parameters() const;
};

}  // namespace rlrun::engine
