// cpu_gemm_nt.cc - the few-rows A B^T kernel (cpu_gemm_nt.h), AVX-512F and AVX2 + FMA.
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

using TileFn = void (*)(int64_t, float, const float*, int64_t, const float*, int64_t, float, float*, int64_t);

// c[r * ldc + j] = alpha * dot + beta * c (beta 0: c only written).
RLRUN_CPU_INLINE void store(float* out, float alpha, float dot, float beta) {
  *out = beta == 0.0f ? alpha * dot : alpha * dot + beta * *out;
}

// The AVX-512 tiles: 16 lanes of k per step. MR rows of A stream from L2 while NR rows of B stay
// in L1, so A's traffic per FMA falls with NR (64 / NR bytes); 4 x 6 = 24 accumulators + 4 + 1
// operands within the 32 zmm registers. SmolLM2 at batch 64, one thread: 4 x 4 238 tokens/s,
// 3 x 8 207 (a 1-row tail), 4 x 6 251.
struct Avx512 {
  static constexpr int kMr = 4, kNr = 6;

  template <int MR, int NR>
  RLRUN_CPU_AVX512 __attribute__((always_inline)) static inline void k_step(__m512 (&acc)[MR][NR], const float* a,
                                                                           int64_t lda, const float* b, int64_t ldb,
                                                                           __mmask16 mask) {
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

  // One MR x NR tile of C: MR rows of A against NR rows of B, then each lane vector summed.
  template <int MR, int NR>
  RLRUN_CPU_AVX512 static void tile(int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
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
      for (int j = 0; j < NR; ++j) store(c + r * ldc + j, alpha, _mm512_reduce_add_ps(acc[r][j]), beta);
    }
  }
};

// The AVX2 tiles: 8 lanes of k per step; 3 x 4 = 12 accumulators + 3 + 1 operands fill the 16 ymm
// registers.
// Avx512's shape, spelled again: GCC's target attribute cannot depend on a template parameter, so
// a tile generic over the instruction set could not be compiled for either.
struct Avx2 {
  static constexpr int kMr = 3, kNr = 4;

  template <int MR, int NR>
  RLRUN_CPU_AVX2 __attribute__((always_inline)) static inline void k_step(__m256 (&acc)[MR][NR], const float* a,
                                                                         int64_t lda, const float* b, int64_t ldb,
                                                                         __m256i mask) {
    __m256 av[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) av[r] = _mm256_maskload_ps(a + r * lda, mask);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m256 bv = _mm256_maskload_ps(b + j * ldb, mask);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[r][j] = _mm256_fmadd_ps(av[r], bv, acc[r][j]);
    }
  }

  RLRUN_CPU_AVX2 __attribute__((always_inline)) static inline float reduce(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }

  template <int MR, int NR>
  RLRUN_CPU_AVX2 static void tile(int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                                  float beta, float* c, int64_t ldc) {
    __m256 acc[MR][NR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) k_step<MR, NR>(acc, a + p, lda, b + p, ldb, _mm256_set1_epi32(-1));
    if (p < k)
      k_step<MR, NR>(acc, a + p, lda, b + p, ldb,
                     _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k - p)), lane));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) store(c + r * ldc + j, alpha, reduce(acc[r][j]), beta);
    }
  }
};

// The tile function of Isa for an MR x NR block, MR <= Isa::kMr and NR <= Isa::kNr (the edges of C).
template <class Isa, int MR, int NR = Isa::kNr>
TileFn tile_for(int nr) {
  if constexpr (NR == 1)
    return Isa::template tile<MR, 1>;
  else
    return nr == NR ? Isa::template tile<MR, NR> : tile_for<Isa, MR, NR - 1>(nr);
}

template <class Isa, int MR = Isa::kMr>
TileFn tile_for(int mr, int nr) {
  if constexpr (MR == 1)
    return tile_for<Isa, 1>(nr);
  else
    return mr == MR ? tile_for<Isa, MR>(nr) : tile_for<Isa, MR - 1>(mr, nr);
}

template <class Isa>
void gemm_nt_tiles(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t j = 0; j < n; j += Isa::kNr) {  // NR rows of B, reused by every row of A
    const int nr = static_cast<int>(n - j < Isa::kNr ? n - j : Isa::kNr);
    for (int64_t i = 0; i < m; i += Isa::kMr) {
      const int mr = static_cast<int>(m - i < Isa::kMr ? m - i : Isa::kMr);
      tile_for<Isa>(mr, nr)(k, alpha, a + i * lda, lda, b + j * ldb, ldb, beta, c + i * ldc + j, ldc);
    }
  }
}

}  // namespace

GemmNtIsa gemm_nt_isa() {
  if (cpu_has_avx512f()) return GemmNtIsa::kAvx512;
  return cpu_has_avx2_fma() ? GemmNtIsa::kAvx2 : GemmNtIsa::kNone;
}

void gemm_nt(GemmNtIsa isa, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  switch (isa) {
    case GemmNtIsa::kAvx512:
      return gemm_nt_tiles<Avx512>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case GemmNtIsa::kAvx2:
      return gemm_nt_tiles<Avx2>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    case GemmNtIsa::kNone:
      break;
  }
  RLRUN_CHECK(false, "gemm_nt without a vector ISA (check gemm_nt_isa())");
}

#else

GemmNtIsa gemm_nt_isa() { return GemmNtIsa::kNone; }

void gemm_nt(GemmNtIsa, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
             int64_t) {
  RLRUN_CHECK(false, "gemm_nt on a machine without AVX2 or AVX-512 (check gemm_nt_isa())");
}

#endif

}  // namespace rlrun::engine::cpu
