// swiglu.cu - out = silu(gate) * up and its backward, elementwise in f32.
//   d up = dout silu(g);   d gate = dout up sig(g) (1 + g (1 - sig(g)))
// Backward reads gate, up and dout before writing, so dgate/dup may alias gate/up.
#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate, const bf16* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    out[i] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * __bfloat162float(up[i]));
  }
}

__global__ void swiglu_backward_kernel(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                                       int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __bfloat162float(gate[i]), u = __bfloat162float(up[i]), dy = __bfloat162float(dout[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dup[i] = __float2bfloat16_rn(dy * g * sig);
    dgate[i] = __float2bfloat16_rn(dy * u * sig * (1.0f + g * (1.0f - sig)));
  }
}

}  // namespace

void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, int64_t n,
                     cudaStream_t stream) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
