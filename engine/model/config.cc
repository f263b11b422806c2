#include "engine/model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/observe/log.h"
#include "common/status.h"

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

std::string describe_model(const ModelConfig& c) {
  const double params = static_cast<double>(c.num_parameters());
  std::string rope = c.rope_scaling.type;
  if (c.rope_scaling.type != "default") rope += str(" x", c.rope_scaling.factor);
  if (c.rope_scaling.type == "llama3" || c.rope_scaling.type == "yarn")
    rope += str(" of ", c.rope_scaling.original_max_position);
  char count[32];
  if (params >= 1e9) std::snprintf(count, sizeof(count), "%.2fB", params / 1e9);
  else if (params >= 1e6) std::snprintf(count, sizeof(count), "%.1fM", params / 1e6);
  else std::snprintf(count, sizeof(count), "%.1fK", params / 1e3);
  std::string out = str(c.architecture, ", ", count, " parameters, context ", c.max_position, ", RoPE ", rope,
                        " (theta ", c.rope_theta, ")");
  if (c.has_sliding_layers()) {
    int64_t sliding = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) sliding += c.is_sliding(l) ? 1 : 0;
    out += str(", sliding window ", c.sliding_window, " on ", sliding, " of ", c.num_layers, " layers (local theta ",
               c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta, ")");
  }
  out += str(", head_dim ", c.head_dim(), c.qk_norm ? " with QK-norm" : "");
  out += c.torch_dtype.empty() ? std::string(", dtype not given") : str(", stored as ", c.torch_dtype);
  return out;
}

ModelConfig architecture_config(const std::string& architecture) {
  ModelConfig c;
  c.architecture = architecture;
  if (architecture == "qwen2") c.qkv_bias = true;
  if (architecture == "qwen3") c.qk_norm = true;
  if (architecture == "gemma3") {
    c.qk_norm = true;
    c.hidden_act = "gelu_pytorch_tanh";
    c.norm_weight_offset = 1.0;
    c.sandwich_norms = true;
    c.query_pre_attn_scalar = 256.0;
    c.tie_embeddings = true;
    c.rope_theta = 1e6;
    c.rope_local_theta = 1e4;
  }
  return c;
}

namespace {

// Upper bound for any size: keeps every shape product far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;

Status validate_sizes(const ModelConfig& c) {
  for (auto [name, v] : {std::pair<const char*, int64_t>{"hidden_size", c.hidden_size}, {"num_layers", c.num_layers},
                         {"num_heads", c.num_heads}, {"num_kv_heads", c.num_kv_heads},
                         {"intermediate_size", c.intermediate_size}, {"vocab_size", c.vocab_size},
                         {"max_position", c.max_position}}) {
    if (v < 1 || v > kMaxDim) return invalid_argument(str("model ", name, " = ", v, " must be in [1, ", kMaxDim, "]"));
  }
  if (c.explicit_head_dim < 0 || c.explicit_head_dim > kMaxDim)
    return invalid_argument(str("model head_dim ", c.explicit_head_dim, " must be in [0, ", kMaxDim, "]"));
  if (c.explicit_head_dim == 0 && c.hidden_size % c.num_heads != 0) {
    return invalid_argument(str("model hidden_size ", c.hidden_size, " is not a multiple of num_heads ", c.num_heads,
                                " (and no head_dim is given)"));
  }
  if (c.head_dim() % 2 != 0) {  // RoPE rotates pairs of dimensions
    return invalid_argument(str("model head_dim ", c.head_dim(), " must be even"));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument(str("model num_heads ", c.num_heads, " is not a multiple of num_kv_heads ", c.num_kv_heads));
  }
  return Status();
}

Status validate_rope(const ModelConfig& c) {
  if (!(c.rope_theta > 0) || !(c.rms_norm_eps > 0) || !(c.rope_local_theta >= 0))
    return invalid_argument("model rope_theta and rms_norm_eps must be positive (rope_local_theta >= 0)");
  const RopeScaling& s = c.rope_scaling;
  if (s.type != "default" && s.type != "linear" && s.type != "dynamic" && s.type != "llama3" && s.type != "yarn")
    return invalid_argument(str("model RoPE type `", s.type, "` is not supported (default, linear, dynamic, llama3, yarn)"));
  if (!(s.factor > 0) || !(s.attention_factor > 0))
    return invalid_argument("model RoPE factor and attention_factor must be positive");
  if ((s.type == "llama3" || s.type == "yarn") && s.original_max_position < 1)
    return invalid_argument(str("model RoPE type ", s.type, " needs original_max_position_embeddings >= 1"));
  if (s.type == "llama3" && !(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0))
    return invalid_argument("model RoPE llama3 needs 0 < low_freq_factor < high_freq_factor");
  return Status();
}

Status validate_layers(const ModelConfig& c) {
  if (!c.layer_types.empty() && static_cast<int64_t>(c.layer_types.size()) != c.num_layers)
    return invalid_argument(str("model layer_types has ", c.layer_types.size(), " entries for ", c.num_layers, " layers"));
  for (const std::string& t : c.layer_types) {
    if (t != "full_attention" && t != "sliding_attention")
      return invalid_argument(str("model layer type `", t, "` is not supported (full_attention, sliding_attention)"));
    if (t == "sliding_attention" && c.sliding_window < 1)
      return invalid_argument("model has sliding_attention layers but no sliding_window");
  }
  if (c.sliding_window < 0) return invalid_argument("model sliding_window must be >= 0");
  if (c.hidden_act != "silu" && c.hidden_act != "gelu_pytorch_tanh")
    return invalid_argument(str("model hidden_act `", c.hidden_act, "` is not supported (silu, gelu_pytorch_tanh)"));
  if (!(c.embedding_scale > 0) || !(c.query_pre_attn_scalar >= 0) || !std::isfinite(c.norm_weight_offset))
    return invalid_argument("model embedding_scale must be > 0, query_pre_attn_scalar >= 0");
  if (c.architecture == "gemma3" &&
      std::abs(c.embedding_scale - std::sqrt(static_cast<double>(c.hidden_size))) > 1e-9 * c.embedding_scale)
    return invalid_argument(str("model gemma3 scales embeddings by sqrt(hidden_size) = ",
                                std::sqrt(static_cast<double>(c.hidden_size)), ", not ", c.embedding_scale));
  return Status();
}

}  // namespace

Status validate_model_config(const ModelConfig& c) {
  if (c.architecture != "llama" && c.architecture != "qwen2" && c.architecture != "qwen3" &&
      c.architecture != "gemma3") {
    return invalid_argument(str("model architecture `", c.architecture, "` is not supported (llama, qwen2, qwen3, gemma3)"));
  }
  RLRUN_RETURN_IF_ERROR(validate_sizes(c));
  RLRUN_RETURN_IF_ERROR(validate_rope(c));
  return validate_layers(c);
}

Status check_implemented(const ModelConfig& c) {
  (void)c;  // everything validate_model_config accepts is computed
  return Status();
}

}  // namespace rlrun::engine
