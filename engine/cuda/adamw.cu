// adamw.cu - the AdamW step over flat f32 tensors, and the sum of squares for the gradient norm.
//
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr * ((m / bc1) / (sqrt(v / bc2) + eps) + weight_decay * param)
// Bias corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t are computed once on the host in double.
// sum_squares writes one double partial per block; the host adds them in a fixed order, so the
// gradient norm is deterministic.
#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bc1, float bc2) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / bc1) / (sqrtf(vi / bc2) + eps);
    param[i] -= lr * (update + weight_decay * param[i]);
  }
}

template <class T>
__global__ void sum_squares_kernel(double* partials, const T* x, int64_t n) {
  __shared__ double per_warp[kThreads / 32];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double xi = to_f32(x[i]);
    sum += xi * xi;
  }
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) total += per_warp[w];
    partials[blockIdx.x] = total;
  }
}

}  // namespace

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
           float eps, float weight_decay, float bc1, float bc2, cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(param, grad, m, v, n, lr, beta1, beta2, eps,
                                                                weight_decay, bc1, bc2);
  CUDA_CHECK_LAUNCH();
}

template <class T>
int sum_squares_partials(double* partials, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  const int64_t needed = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(needed < kSumSquaresMaxBlocks ? needed : kSumSquaresMaxBlocks);
  sum_squares_kernel<T><<<blocks, kThreads, 0, stream>>>(partials, x, n);
  CUDA_CHECK_LAUNCH();
  return blocks;
}

template int sum_squares_partials<float>(double*, const float*, int64_t, cudaStream_t);
template int sum_squares_partials<bf16>(double*, const bf16*, int64_t, cudaStream_t);

}  // namespace rlrun::engine::cuda
