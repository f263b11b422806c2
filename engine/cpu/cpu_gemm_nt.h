// cpu_gemm_nt.h - C = alpha * A B^T + beta * C for few rows of A: a decode step's products.
//
// A forward product is x W^T with W (out x in) row-major: both operands run along k. sgemm packs
// the whole of W into its kernel's layout on every call, and with a few dozen rows of x that
// copy costs about as much as the arithmetic (perf, SmolLM2 at batch 64: sgemm_incopy 30% of a
// generation step, the kernel 39%). This kernel needs no copy: each 4 x 6 tile of C is 24 dot
// products of rows that are already contiguous, kept in AVX-512 registers along k; W's 6 rows stay
// in L1 while every row of x passes them. Past kGemmNtMaxRows rows sgemm's packing pays for itself.
#pragma once

#include <cstdint>

namespace rlrun::engine::cpu {

// Rows of A up to which matmul uses gemm_nt_avx512: SmolLM2 generating 64 sequences, 12% more
// tokens/s than sgemm; 128 sequences, the same.
constexpr int64_t kGemmNtMaxRows = 128;

// c[i * ldc + j] = alpha * sum_p a[i * lda + p] * b[j * ldb + p] + beta * c[i * ldc + j], for
// i < m, j < n (beta 0: c is only written). Needs cpu_has_avx512f() (cpu_math.h). Single-threaded.
void gemm_nt_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace rlrun::engine::cpu
