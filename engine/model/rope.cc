#include "engine/model/rope.h"

#include <algorithm>
#include <cmath>

namespace rlrun::engine {
namespace {

// 1 / theta^(2i/D), each step in f32 like torch's `1.0 / (base ** (arange(0, dim, 2).float() / dim))`.
std::vector<float> default_inv_freq(double theta, int64_t d) {
  std::vector<float> f(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    f[i] = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(d));
  return f;
}

// HF _compute_llama3_parameters (tensor ops in f32, Python scalars in double).
void llama3(std::vector<float>& f, const RopeScaling& s) {
  const double old_len = static_cast<double>(s.original_max_position);
  const float low_wavelen = static_cast<float>(old_len / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / s.high_freq_factor);
  const float factor = static_cast<float>(s.factor);
  for (float& inv : f) {
    const float wavelen = static_cast<float>(2 * M_PI) / inv;
    const float scaled = wavelen > low_wavelen ? inv / factor : inv;
    const float smooth = (static_cast<float>(old_len) / wavelen - static_cast<float>(s.low_freq_factor)) /
                         static_cast<float>(s.high_freq_factor - s.low_freq_factor);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    inv = medium ? smoothed : scaled;
  }
}

// HF _compute_yarn_parameters.
void yarn(std::vector<float>& f, const RopeScaling& s, double theta, int64_t d) {
  const double dim = static_cast<double>(d), base = theta, omax = static_cast<double>(s.original_max_position);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(omax / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // HF: prevent singularity
  const float factor = static_cast<float>(s.factor);
  for (int64_t i = 0; i < d / 2; ++i) {
    const float pos_freq = std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(d));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    f[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& c, int64_t layer) {
  const int64_t d = c.head_dim();
  const double theta = c.layer_rope_theta(layer);
  std::vector<float> f = default_inv_freq(theta, d);
  if (c.is_sliding(layer)) return f;  // sliding layers: plain RoPE of their own base
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "linear") {
    for (float& x : f) x /= static_cast<float>(s.factor);
  } else if (s.type == "llama3") {
    llama3(f, s);
  } else if (s.type == "yarn") {
    yarn(f, s, theta, d);
  }
  return f;
}

float rope_scale(const ModelConfig& c, int64_t layer) {
  if (c.is_sliding(layer) || c.rope_scaling.type != "yarn") return 1.0f;
  return static_cast<float>(c.rope_scaling.attention_factor);
}

}  // namespace rlrun::engine
