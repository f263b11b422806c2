#include "engine/model_config.h"

#include <utility>

#include "common/log.h"

namespace rlrun::engine {

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, kv = num_kv_heads * head_dim();
  int64_t attn = h * h /*q*/ + 2 * h * kv /*k,v*/ + h * h /*o*/;
  if (qkv_bias) attn += h + 2 * kv;
  const int64_t mlp = 3 * h * intermediate_size;  // gate, up, down
  const int64_t norms = 2 * h;
  const int64_t per_layer = attn + mlp + norms;
  const int64_t embed = vocab_size * h;
  return embed + (tie_embeddings ? 0 : embed) + num_layers * per_layer + h /*final norm*/;
}

Status validate_model_config(const ModelConfig& c) {
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  if (c.architecture != "llama" && c.architecture != "qwen2") {
    return invalid_argument(str("model architecture `", c.architecture, "` is not supported (llama or qwen2)"));
  }
  for (auto [name, v] : {std::pair<const char*, int64_t>{"hidden_size", c.hidden_size}, {"num_layers", c.num_layers},
                         {"num_heads", c.num_heads}, {"num_kv_heads", c.num_kv_heads},
                         {"intermediate_size", c.intermediate_size}, {"vocab_size", c.vocab_size},
                         {"max_position", c.max_position}}) {
    if (v < 1 || v > kMaxDim) return invalid_argument(str("model ", name, " = ", v, " must be in [1, ", kMaxDim, "]"));
  }
  if (c.hidden_size % c.num_heads != 0 || c.head_dim() % 2 != 0) {
    return invalid_argument(str("model hidden_size ", c.hidden_size, " is not a multiple of num_heads ", c.num_heads,
                                " with an even head_dim (RoPE rotates pairs)"));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument(str("model num_heads ", c.num_heads, " is not a multiple of num_kv_heads ", c.num_kv_heads));
  }
  if (!(c.rope_theta > 0) || !(c.rms_norm_eps > 0)) {
    return invalid_argument("model rope_theta and rms_norm_eps must be positive");
  }
  return Status();
}

}  // namespace rlrun::engine
