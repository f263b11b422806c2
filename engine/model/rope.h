// model/rope.h - RoPE's inverse frequencies of a layer, as HF transformers 5 computes them
// (modeling_rope_utils.py), for Backend::rope_forward.
//
// default  inv_freq[i] = 1 / theta^(2i/D), in f32 like torch
// linear   default / factor
// dynamic  default: NTK rescaling starts past max_position_embeddings, and rlrun runs no position
//          beyond it (Model checks positions < max_position for this type)
// llama3   Llama 3.1's band: wavelengths above original/low_freq_factor divided by factor, below
//          original/high_freq_factor kept, smoothly mixed between
// yarn     interpolation (/factor) and extrapolation mixed by a linear ramp over the dimensions
//          between the correction range of beta_fast and beta_slow; cos and sin times
//          attention_factor (rope_scale)
// Sliding layers use plain RoPE of rope_local_theta (Gemma 3); full layers rope_theta with the
// config's scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/config.h"

namespace rlrun::engine {

// (head_dim / 2) inverse frequencies of layer `layer`.
std::vector<float> rope_inv_freq(const ModelConfig& config, int64_t layer);
// The factor cos and sin are multiplied by in layer `layer` (YaRN's attention factor, else 1).
float rope_scale(const ModelConfig& config, int64_t layer);

}  // namespace rlrun::engine
