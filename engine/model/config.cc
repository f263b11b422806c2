#include "engine/model/config.h"

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

}  // namespace rlrun::engine
