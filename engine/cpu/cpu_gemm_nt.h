// cpu_gemm_nt.h - C = alpha * A B^T + beta * C for few rows of A: a decode step's products.
//
// A forward product is x W^T with W (out x in) row-major: both operands run along k. sgemm packs
// the whole of W into its kernel's layout on every call, and with a few dozen rows of x that
// copy costs about as much as the arithmetic (perf, SmolLM2 at batch 64: sgemm_incopy 30% of a
// generation step, the kernel 39%). This kernel needs no copy: each 4 x 6 tile of C is 24 dot
// products of rows that are already contiguous, kept in AVX-512 registers along k (3 x 4 tiles in
// AVX2 registers on CPUs without AVX-512); W's rows stay in L1 while every row of x passes them.
// Past gemm_nt_max_rows() rows sgemm's packing pays for itself.
#pragma once

#include <cstdint>

namespace rlrun::engine::cpu {

// The kernel's instruction sets; kNone: this CPU has neither (matmul stays with sgemm).
enum class GemmNtIsa { kNone, kAvx2, kAvx512 };
GemmNtIsa gemm_nt_isa();  // the widest this CPU runs

// Rows of A up to which matmul uses gemm_nt. AVX-512 (Sapphire Rapids): SmolLM2 generating 64
// sequences, 12% more tokens/s than sgemm; 128, the same. AVX2 (an AMD EPYC without AVX-512,
// 2 threads): 1.4x sgemm's tokens/s at batch 1, 1.15x at 8, even at 16, 0.8x at 32 and 64.
constexpr int64_t gemm_nt_max_rows(GemmNtIsa isa) {
  return isa == GemmNtIsa::kAvx512 ? 128 : isa == GemmNtIsa::kAvx2 ? 8 : 0;
}

// c[i * ldc + j] = alpha * sum_p a[i * lda + p] * b[j * ldb + p] + beta * c[i * ldc + j], for
// i < m, j < n (beta 0: c is only written), with `isa`'s kernel (not kNone, and one this CPU runs).
// Single-threaded.
void gemm_nt(GemmNtIsa isa, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace rlrun::engine::cpu
