#include "engine/model/config.h"

#include <algorithm>
#include <cmath>

namespace rlrun::engine {

bool ModelConfig::is_sliding(int64_t layer) const {
  return sliding_window > 0 && layer >= 0 && layer < static_cast<int64_t>(layer_types.size()) &&
         layer_types[static_cast<size_t>(layer)] == "sliding_attention";
}

bool ModelConfig::has_sliding_layers() const {
  for (int64_t l = 0; l < num_layers; ++l)
    if (is_sliding(l)) return true;
  return false;
}

bool ModelConfig::has_full_layers() const {
  for (int64_t l = 0; l < num_layers; ++l)
    if (!is_sliding(l)) return true;
  return false;
}

double ModelConfig::layer_rope_theta(int64_t layer) const {
  return is_sliding(layer) && rope_local_theta > 0 ? rope_local_theta : rope_theta;
}

double ModelConfig::attention_scale() const {
  const double s = query_pre_attn_scalar > 0 ? query_pre_attn_scalar : static_cast<double>(head_dim());
  return 1.0 / std::sqrt(s);
}

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, q = num_heads * head_dim(), kv = num_kv_heads * head_dim();
  int64_t attn = h * q /*q*/ + 2 * h * kv /*k,v*/ + q * h /*o*/;
  if (qkv_bias) attn += q + 2 * kv;
  if (qk_norm) attn += 2 * head_dim();
  const int64_t mlp = 3 * h * intermediate_size;  // gate, up, down
  const int64_t norms = (sandwich_norms ? 4 : 2) * h;
  const int64_t per_layer = attn + mlp + norms;
  const int64_t embed = vocab_size * h;
  return embed + (tie_embeddings ? 0 : embed) + num_layers * per_layer + h /*final norm*/;
}

}  // namespace rlrun::engine
