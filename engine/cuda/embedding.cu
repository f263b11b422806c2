// embedding.cu - token embedding lookup and its scatter-add backward.
//
// Backward adds each dout row into dtable with f32 atomics (repeated ids sum), so the summation
// order, and the last bits of dtable, vary from run to run.
#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda {

namespace {

constexpr int kThreads = 256;

// out (n, h) = table (vocab, h)[ids]; a bad id zeroes its row and raises kErrEmbeddingId.
__global__ void embedding_forward_kernel(bf16* out, const bf16* table, const int32_t* ids, int64_t n, int64_t h,
                                         int64_t vocab, int* err) {
  const int64_t total = n * h;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / h, c = i % h;
    const int32_t id = ids[row];
    if (id < 0 || id >= vocab) {
      out[i] = __float2bfloat16_rn(0.0f);
      if (c == 0) atomicOr(err, kErrEmbeddingId);
      continue;
    }
    out[i] = table[static_cast<int64_t>(id) * h + c];
  }
}

__global__ void embedding_backward_kernel(float* dtable, const bf16* dout, const int32_t* ids, int64_t n,
                                          int64_t h, int64_t vocab, int* err) {
  const int64_t total = n * h;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / h, c = i % h;
    const int32_t id = ids[row];
    if (id < 0 || id >= vocab) {
      if (c == 0) atomicOr(err, kErrEmbeddingId);
      continue;
    }
    atomicAdd(dtable + static_cast<int64_t>(id) * h + c, __bfloat162float(dout[i]));
  }
}

}  // namespace

void embedding_forward(bf16* out, const bf16* table, const int32_t* ids, int64_t n, int64_t h, int64_t vocab,
                       int* err, cudaStream_t stream) {
  if (n * h == 0) return;
  embedding_forward_kernel<<<grid_for(n * h, kThreads), kThreads, 0, stream>>>(out, table, ids, n, h, vocab, err);
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dtable, const bf16* dout, const int32_t* ids, int64_t n, int64_t h, int64_t vocab,
                        int* err, cudaStream_t stream) {
  if (n * h == 0) return;
  embedding_backward_kernel<<<grid_for(n * h, kThreads), kThreads, 0, stream>>>(dtable, dout, ids, n, h, vocab,
                                                                                 err);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
