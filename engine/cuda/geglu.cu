// geglu.cu - out = gelu(gate) * up (HF's gelu_pytorch_tanh, Gemma's MLP) and its backward, in f32.
//   gelu(g) = g/2 (1 + t), t = tanh(c (g + 0.044715 g^3)), c = sqrt(2/pi)
//   d up = dout gelu(g);   d gate = dout up (0.5 (1 + t) + 0.5 g (1 - t^2) c (1 + 3 * 0.044715 g^2))
// Backward reads gate, up and dout before writing, so dgate/dup may alias gate/up.
// Builds here; not yet run on a device (no GPU on the build machines).
#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;

__global__ void geglu_forward_kernel(bf16* out, const bf16* gate, const bf16* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    const float t = tanhf(kC * (g + kA * g * g * g));
    out[i] = __float2bfloat16_rn(0.5f * g * (1.0f + t) * __bfloat162float(up[i]));
  }
}

__global__ void geglu_backward_kernel(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                                      int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __bfloat162float(gate[i]), u = __bfloat162float(up[i]), dy = __bfloat162float(dout[i]);
    const float t = tanhf(kC * (g + kA * g * g * g));
    const float dgelu = 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kC * (1.0f + 3.0f * kA * g * g);
    dup[i] = __float2bfloat16_rn(dy * 0.5f * g * (1.0f + t));
    dgate[i] = __float2bfloat16_rn(dy * u * dgelu);
  }
}

}  // namespace

void geglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  geglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

void geglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  geglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
