// cpu_fma_peak.cc - FMA chains in registers (cpu_fma_peak.h).
#include "engine/cpu/cpu_fma_peak.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 lane reductions pass _mm*_undefined_* values that its -Wuninitialized reports
// (GCC bug 105593, fixed in GCC 13), as in cpu_gemm_nt.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "engine/cpu/cpu_math.h"

namespace rlrun::engine::cpu {

namespace {

#if defined(__x86_64__) && defined(__GNUC__)

// 12 independent accumulators: more than FMA latency (4) x FMA ports (2) on every core of this
// decade. Returns a value that depends on every FMA, so none is optimised away.
constexpr int kChains = 12;

RLRUN_CPU_AVX512 float fma_chains_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

RLRUN_CPU_AVX2 float fma_chains_avx2(int64_t iterations) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

#endif

}  // namespace

double measure_fma_peak_gflops(const CpuFeatures& cpu) {
#if defined(__x86_64__) && defined(__GNUC__)
  const bool wide = cpu.avx512f && cpu.fma;
  if (!wide && !(cpu.avx2 && cpu.fma)) return 0;
  const int lanes = wide ? 16 : 8;
  constexpr int64_t kIterations = 200000;  // 2.4M FMAs per repetition: ~1-3 ms
  volatile float sink = 0;
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    sink = sink + (wide ? fma_chains_avx512(kIterations) : fma_chains_avx2(kIterations));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * lanes * kChains * static_cast<double>(kIterations) / best / 1e9;
#else
  (void)cpu;
  return 0;
#endif
}

}  // namespace rlrun::engine::cpu
