// cpu_gemm_nt.cc - the few-rows A B^T kernel (cpu_gemm_nt.h), AVX-512F.
#include "engine/cpu/cpu_gemm_nt.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 intrinsics (masked loads, lane reductions) pass _mm*_undefined_* values that
// its -Wuninitialized reports at every inlined call (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "common/check.h"
#include "engine/cpu/cpu_math.h"

namespace rlrun::engine::cpu {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

// 16 lanes of k (fewer under `mask`) of an MR x NR tile's dot products.
template <int MR, int NR>
RLRUN_CPU_AVX512 __attribute__((always_inline)) inline void k_step(__m512 (&acc)[MR][NR], const float* a, int64_t lda,
                                                                  const float* b, int64_t ldb, __mmask16 mask) {
  __m512 av[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) av[r] = _mm512_maskz_loadu_ps(mask, a + r * lda);
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const __m512 bv = _mm512_maskz_loadu_ps(mask, b + j * ldb);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][j] = _mm512_fmadd_ps(av[r], bv, acc[r][j]);
  }
}

// One MR x NR tile of C: MR rows of A against NR rows of B, 16 lanes of k at a time, then each
// lane vector summed. MR * NR accumulators + MR + 1 operands stay within the 32 zmm registers.
template <int MR, int NR>
RLRUN_CPU_AVX512 void tile(int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                           float beta, float* c, int64_t ldc) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) k_step<MR, NR>(acc, a + p, lda, b + p, ldb, static_cast<__mmask16>(0xFFFF));
  if (p < k) k_step<MR, NR>(acc, a + p, lda, b + p, ldb, static_cast<__mmask16>((1u << (k - p)) - 1));
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float* out = c + r * ldc + j;
      const float dot = alpha * _mm512_reduce_add_ps(acc[r][j]);
      *out = beta == 0.0f ? dot : dot + beta * *out;
    }
  }
}

using TileFn = void (*)(int64_t, float, const float*, int64_t, const float*, int64_t, float, float*, int64_t);

// The tile: MR rows of A stream from L2 while NR rows of B stay in L1, so A's traffic per FMA
// falls with NR (64 / NR bytes); 4 x 6 = 24 accumulators + 4 + 1 operands. SmolLM2 at batch 64,
// one thread: 4 x 4 238 tokens/s, 3 x 8 207 (a 1-row tail), 4 x 6 251.
constexpr int kMr = 4, kNr = 6;

// The tile function for an MR x NR block, MR <= kMr and NR <= kNr (the edges of C).
template <int MR, int NR = kNr>
TileFn tile_for(int nr) {
  if constexpr (NR == 1)
    return tile<MR, 1>;
  else
    return nr == NR ? tile<MR, NR> : tile_for<MR, NR - 1>(nr);
}

template <int MR = kMr>
TileFn tile_for(int mr, int nr) {
  if constexpr (MR == 1)
    return tile_for<1>(nr);
  else
    return mr == MR ? tile_for<MR>(nr) : tile_for<MR - 1>(mr, nr);
}

}  // namespace

void gemm_nt_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t j = 0; j < n; j += kNr) {  // NR rows of B, reused by every row of A
    const int nr = static_cast<int>(n - j < kNr ? n - j : kNr);
    for (int64_t i = 0; i < m; i += kMr) {
      const int mr = static_cast<int>(m - i < kMr ? m - i : kMr);
      tile_for(mr, nr)(k, alpha, a + i * lda, lda, b + j * ldb, ldb, beta, c + i * ldc + j, ldc);
    }
  }
}

#else

void gemm_nt_avx512(int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
                    int64_t) {
  RLRUN_CHECK(false, "gemm_nt_avx512 on a machine without AVX-512 (check cpu_has_avx512f())");
}

#endif

}  // namespace rlrun::engine::cpu
