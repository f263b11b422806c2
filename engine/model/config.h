// model/config.h - the shape and the math of a decoder: Llama, Qwen2/2.5, SmolLM2, Qwen3, Gemma 3
// (text).
//
// Filled from the config's `model:` section, from an HF `config.json` (engine/io/hf_config.h, the
// one reader of config.json) or from a GGUF file's metadata (engine/io/gguf_model.h); the engine
// knows nothing of YAML. Names follow HF's config.json where one exists. Every member that can
// change what the model computes is here; a config.json field that would change it and has no
// member here is refused by the reader, never ignored.
//
// One layer, every variant (members that switch each part in brackets):
//   h   = norm(x) [norm_weight_offset: norm(x) = rmsnorm(x) * (offset + w)]
//   q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)        [qkv_bias]  q: (N, Hq, D), D = head_dim()
//   q, k = rmsnorm per head (weight (D)) of q, k               [qk_norm]
//   q, k = rope(q), rope(k), base and scaling per layer type   [rope_theta, rope_scaling, rope_local_theta]
//   a   = causal attention, scale attention_scale(), within    [query_pre_attn_scalar]
//         the last sliding_window positions on sliding layers  [sliding_window, layer_types]
//   o   = a Wo^T;  norm(o) first                               [sandwich_norms]
//   x   = x + o
//   h   = norm(x); m = act(h Wg^T) * (h Wu^T); m Wd^T          [hidden_act]
//   x   = x + (norm of that when sandwich_norms)
// The embedding lookup is multiplied by embedding_scale; the head is norm, then lm_head (or the
// embedding table, tie_embeddings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::engine {

// RoPE's frequencies, as HF's `rope_type` computes them (modeling_rope_utils.py): "default"
// (theta^(-2i/D)), "linear" (divided by factor), "dynamic" (NTK: unchanged up to max_position,
// the longest sequence rlrun runs), "llama3" (Llama 3.1's smoothed band), "yarn" (interpolation
// ramp, and cos/sin multiplied by attention_factor).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;                  // linear, dynamic, llama3, yarn
  int64_t original_max_position = 0;    // llama3, yarn: original_max_position_embeddings
  double low_freq_factor = 1.0;         // llama3
  double high_freq_factor = 4.0;        // llama3
  double beta_fast = 32.0;              // yarn
  double beta_slow = 1.0;               // yarn
  double attention_factor = 1.0;        // yarn: resolved by the reader (HF's default from factor)
  bool truncate = true;                 // yarn: floor/ceil the correction range
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string architecture = "llama";  // "llama", "qwen2", "qwen3" or "gemma3" (HF model_type, text only)
  int64_t hidden_size = 256;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 4;            // grouped-query attention: num_heads % num_kv_heads == 0
  int64_t intermediate_size = 688;
  int64_t vocab_size = 512;
  double rope_theta = 10000.0;         // RoPE base of the full-attention layers
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = false;         // lm_head shares the embedding table
  bool qkv_bias = false;               // biases on q/k/v projections (qwen2)
  int64_t max_position = 2048;
  int64_t bos_token_id = -1;           // -1: none
  int64_t eos_token_id = -1;           // the first of config.json's eos_token_id; -1: none
  int64_t pad_token_id = -1;           // -1: none; else its embedding lookups get no gradient (torch's padding_idx)
  std::vector<int64_t> extra_eos_token_ids;  // the rest of an eos_token_id list (Llama 3: 128008, 128009)

  // ---- beyond Llama/Qwen2 (defaults: what Llama computes) ----
  int64_t explicit_head_dim = 0;       // config.json's head_dim; 0: hidden_size / num_heads
  RopeScaling rope_scaling;            // of the full-attention layers (sliding ones: plain RoPE)
  double rope_local_theta = 0.0;       // RoPE base of sliding layers (Gemma's rope_local_base_freq); 0: rope_theta
  bool qk_norm = false;                // q_norm/k_norm: RMSNorm over each head's D dims, before RoPE (qwen3, gemma3)
  std::string hidden_act = "silu";     // the MLP's gate: "silu" (SwiGLU) or "gelu_pytorch_tanh" (GeGLU, gemma3)
  double norm_weight_offset = 0.0;     // every RMSNorm multiplies by (offset + weight): 1 for gemma3
  bool sandwich_norms = false;         // gemma3: norms on the attention and MLP outputs too (HF names:
                                       // post_attention_layernorm after attention, pre_/post_feedforward_layernorm)
  double embedding_scale = 1.0;        // embeddings multiplied by it (gemma3: sqrt(hidden_size))
  double query_pre_attn_scalar = 0.0;  // attention scale 1/sqrt(this) (gemma3); 0: 1/sqrt(head_dim)
  int64_t sliding_window = 0;          // a sliding layer's query sees the last sliding_window positions
                                       // (itself included); 0: no sliding layers
  std::vector<std::string> layer_types;  // per layer "full_attention" or "sliding_attention"; empty: all full
  std::string torch_dtype;             // the dtype config.json says the weights are stored in ("" unknown);
                                       // informative: the engine computes in its backend's dtype

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_heads; }
  // True when layer `layer` attends within sliding_window (layer_types[layer] == "sliding_attention").
  bool is_sliding(int64_t layer) const;
  bool has_sliding_layers() const;
  bool has_full_layers() const;
  // RoPE base of layer `layer`: rope_local_theta on sliding layers (when set), else rope_theta.
  double layer_rope_theta(int64_t layer) const;
  // The softmax scale of attention scores: 1 / sqrt(query_pre_attn_scalar or head_dim()).
  double attention_scale() const;
  // Parameters of the whole model (embedding counted once when tied).
  int64_t num_parameters() const;
  bool operator==(const ModelConfig&) const = default;
};

// The defaults of an architecture, with what it always computes: qwen2 q/k/v biases; qwen3
// QK-norm; gemma3 QK-norm, GeGLU, (1 + w) norms, sandwich norms, embeddings scaled by
// sqrt(hidden_size) (set again whenever hidden_size changes: hf_config, gguf_model), query scale
// 1/sqrt(256) and tied embeddings. An unknown name keeps Llama's defaults
// (validate_model_config refuses it).
ModelConfig architecture_config(const std::string& architecture);

// Checks a ModelConfig, from wherever it comes (config.json, YAML, GGUF): positive sizes, head
// counts that divide, an even head_dim, a known architecture, activation, RoPE type and layer
// types. Errors name the member.
Status validate_model_config(const ModelConfig& config);
// One line for a user: architecture, parameter count, context length, RoPE variant, head_dim,
// sliding layers and the dtype config.json names, e.g. "qwen3, 596.0M parameters, context 40960,
// RoPE default (theta 1e+06), head_dim 128, stored as bfloat16".
std::string describe_model(const ModelConfig& config);
// What the engine reads but does not compute yet (Model::create and read_checkpoint_config refuse it).
Status check_implemented(const ModelConfig& config);

}  // namespace rlrun::engine
