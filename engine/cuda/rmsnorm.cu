// rmsnorm.cu - RMSNorm forward and backward, one warp per row (llm.c's layernorm layout).
//
//   y_c = x_c r w_c,  r = (mean(x^2) + eps)^-1/2
//   dx_c = r dy_c w_c - r^3 / H * x_c * sum_j dy_j w_j x_j,   dw_c += sum over rows of dy_c x_c r
// Backward accumulates dweight per block in shared memory (H floats), then adds each block's sum
// to global memory with one atomic per column: a grid of a few hundred blocks keeps atomics rare,
// but their order (and dweight's last bits) varies between runs.
#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kWarps = 8;  // rows per block at a time
constexpr int kBackwardBlocks = 264;  // about two per SM on an H100

__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const bf16* x, const bf16* w, int64_t n, int64_t h,
                                       float eps, float offset) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  if (row >= n) return;
  const bf16* xr = x + row * h;
  float ss = 0.0f;
  for (int64_t c = lane; c < h; c += 32) {
    const float v = __bfloat162float(xr[c]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(h) + eps);
  bf16* orow = out + row * h;
  for (int64_t c = lane; c < h; c += 32)
    orow[c] = __float2bfloat16_rn(__bfloat162float(xr[c]) * r * (offset + __bfloat162float(w[c])));
  if (rstd != nullptr && lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_kernel(bf16* dx, float* dweight, const bf16* dout, const bf16* x, const bf16* w,
                                        const float* rstd, int64_t n, int64_t h, float offset) {
  extern __shared__ float dw_block[];  // (h)
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) dw_block[c] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (int64_t row = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; row < n; row += int64_t{gridDim.x} * kWarps) {
    const bf16 *xr = x + row * h, *dyr = dout + row * h;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int64_t c = lane; c < h; c += 32)
      dot += __bfloat162float(dyr[c]) * (offset + __bfloat162float(w[c])) * __bfloat162float(xr[c]);
    dot = warp_sum(dot);
    const float k = r * r * r * dot / static_cast<float>(h);
    bf16* dxr = dx + row * h;
    for (int64_t c = lane; c < h; c += 32) {
      const float xv = __bfloat162float(xr[c]), dy = __bfloat162float(dyr[c]);
      dxr[c] = __float2bfloat16_rn(r * dy * (offset + __bfloat162float(w[c])) - k * xv);
      atomicAdd(&dw_block[c], dy * xv * r);
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < h; c += blockDim.x) atomicAdd(dweight + c, dw_block[c]);
}

}  // namespace

void rmsnorm_forward(bf16* out, float* rstd, const bf16* x, const bf16* weight, int64_t n, int64_t h, float eps,
                     float offset, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  rmsnorm_forward_kernel<<<blocks, kWarps * 32, 0, stream>>>(out, rstd, x, weight, n, h, eps, offset);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(bf16* dx, float* dweight, const bf16* dout, const bf16* x, const bf16* weight,
                      const float* rstd, int64_t n, int64_t h, float offset, cudaStream_t stream) {
  if (n == 0) return;
  const size_t smem = static_cast<size_t>(h) * sizeof(float);
  allow_shared_memory(rmsnorm_backward_kernel, smem);
  const int64_t needed = (n + kWarps - 1) / kWarps;
  const unsigned blocks = static_cast<unsigned>(needed < kBackwardBlocks ? needed : kBackwardBlocks);
  rmsnorm_backward_kernel<<<blocks, kWarps * 32, smem, stream>>>(dx, dweight, dout, x, weight, rstd, n, h, offset);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
