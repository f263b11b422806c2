// rope.cu - rotary position embedding, HF "rotate_half" layout (pairs (i, i + D/2)), in place.
//
// One thread per (token, head, pair). Angles in f32 like HF: angle = f32(position) * inv_freq_i,
// inv_freq given (model/rope.h: the RoPE variant); cos and sin times `scale` (YaRN's attention
// factor); backward rotates by -angle (sign = -1), the transpose.
// Not --use_fast_math: sincosf stays accurate for the large angles of long contexts.
#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(bf16* x, const int32_t* positions, const float* inv_freqs, int64_t n, int64_t heads,
                            int64_t d, float scale, float sign) {
  const int64_t half = d / 2, total = n * heads * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half, row = idx / half;  // row = token * heads + head
    const int64_t token = row / heads;
    float s, c;
    sincosf(static_cast<float>(positions[token]) * inv_freqs[i], &s, &c);
    c *= scale;
    s *= sign * scale;
    bf16* x1 = x + row * d + i;
    bf16* x2 = x1 + half;
    const float a = __bfloat162float(*x1), b = __bfloat162float(*x2);
    *x1 = __float2bfloat16_rn(a * c - b * s);
    *x2 = __float2bfloat16_rn(b * c + a * s);
  }
}

}  // namespace

void rope(bf16* x, const int32_t* positions, const float* inv_freq, int64_t n, int64_t heads, int64_t d, float scale,
          float sign, cudaStream_t stream) {
  const int64_t total = n * heads * (d / 2);
  if (total == 0) return;
  rope_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(x, positions, inv_freq, n, heads, d, scale, sign);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
