// elementwise.cu - dtype conversion, add / axpy / scale, and the bias add with its column-sum backward.
//
// Grid-stride loops over flat arrays; every value is widened to f32, combined, and rounded once.
#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void f32_to_bf16_kernel(bf16* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void bf16_to_f32_kernel(float* dst, const bf16* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <class T>
__global__ void axpy_kernel(T* y, float alpha, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_f32<T>(to_f32(y[i]) + alpha * to_f32(x[i]));
}

template <class T>
__global__ void scale_kernel(T* x, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = from_f32<T>(alpha * to_f32(x[i]));
}

__global__ void add_bias_kernel(bf16* out, const bf16* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __float2bfloat16_rn(__bfloat162float(out[i]) + __bfloat162float(bias[i % cols]));
}

// Block (32, 8) owns 32 columns: each of the 8 thread rows sums every 8th row, then the block
// adds its 8 partial sums. One block per column slice, so no atomics and a deterministic result.
__global__ void add_bias_backward_kernel(float* dbias, const bf16* dout, int64_t rows, int64_t cols) {
  __shared__ float partial[8][33];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = threadIdx.y; r < rows; r += 8) sum += __bfloat162float(dout[r * cols + col]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int t = 0; t < 8; ++t) total += partial[t][threadIdx.x];
    dbias[col] += total;
  }
}

}  // namespace

void convert_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

void convert_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void add(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void axpy(T* y, float alpha, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  axpy_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, alpha, x, n);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void scale(T* x, float alpha, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, alpha, n);
  CUDA_CHECK_LAUNCH();
}

template void add<float>(float*, const float*, const float*, int64_t, cudaStream_t);
template void add<bf16>(bf16*, const bf16*, const bf16*, int64_t, cudaStream_t);
template void axpy<float>(float*, float, const float*, int64_t, cudaStream_t);
template void axpy<bf16>(bf16*, float, const bf16*, int64_t, cudaStream_t);
template void scale<float>(float*, float, int64_t, cudaStream_t);
template void scale<bf16>(bf16*, float, int64_t, cudaStream_t);

void add_bias(bf16* out, const bf16* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(out, bias, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void add_bias_backward(float* dbias, const bf16* dout, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols == 0) return;
  const unsigned blocks = static_cast<unsigned>((cols + 31) / 32);
  add_bias_backward_kernel<<<blocks, dim3(32, 8), 0, stream>>>(dbias, dout, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
