// matmul.h - row-major GEMM through cuBLASLt: bf16 (or f32) operands, f32 accumulation.
//
// cuBLASLt is column-major; a row-major (M, N) matrix is the column-major (N, M) one, so
//   out = op(a) op(b)   is computed as   out^T = op(b)^T op(a)^T
// by handing cuBLASLt b as its "A" and a as its "B" (the classic trick: no copies, no transposes).
// Algorithms come from cuBLASLt's heuristic once per (shape, transposes, dtypes, alignments) and
// are cached; the workspace belongs to the caller (32 MiB is what Hopper's fastest kernels ask).
//
// Threads: one thread at a time (the owning backend's).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace rlrun::engine::cuda {

class Matmul {
 public:
  Matmul(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // out (m, n) = alpha op(a) op(b) + beta out, all row-major. a is stored (m, k) or, with
  // trans_a, (k, m) with leading dimension lda (its column count); b likewise (k, n) or (n, k).
  // ab_type: CUDA_R_16BF or CUDA_R_32F; out_type CUDA_R_16BF or CUDA_R_32F. beta == 0 never reads
  // out. k == 0 is not allowed (the caller scales out itself).
  void run(void* out, cudaDataType_t out_type, const void* a, const void* b, cudaDataType_t ab_type, int64_t m,
           int64_t n, int64_t k, bool trans_a, bool trans_b, float alpha, float beta);

 private:
  // (m, n, k, trans_a, trans_b, ab_type, out_type, beta != 0, alignment of a, b, out)
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, int, bool, int, int, int>;
  const cublasLtMatmulAlgo_t& algo_for(const Key& key, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                                       cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc);

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace rlrun::engine::cuda
