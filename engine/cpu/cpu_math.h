// cpu_math.h - small vectorisable helpers for the CPU backend's loops.
//
// Hot loops are compiled twice: for AVX2 + FMA and for baseline x86-64 (SSE2), so default builds
// run on any x86-64 yet use 8-wide FMA where the machine has it. The pattern, in one .cc file:
//   RLRUN_CPU_INLINE void op_body(args) { ...loops... }            // the one implementation
//   RLRUN_CPU_AVX2 void op_avx2(args) { op_body(args); }            // compiled for AVX2 + FMA
//   void op_base(args) { op_body(args); }                           // compiled for the baseline
//   cpu_has_avx2_fma() ? op_avx2(args) : op_base(args);
// Everything called from a body inside its loops must be RLRUN_CPU_INLINE too: GCC does not
// inline ordinary functions (std::min, std::exp) into a function with other target options,
// and a call in a loop stops its vectorisation.
#pragma once

#include <cstdint>

#include "engine/cpu/cpu_features.h"  // cpu_has_avx2_fma(), cpu_has_avx512f()

#if defined(__x86_64__) && defined(__GNUC__)
#define RLRUN_CPU_AVX2 __attribute__((target("avx2,fma")))
#define RLRUN_CPU_AVX512 __attribute__((target("avx512f,fma")))  // intrinsics only (cpu_gemm_nt.cc)
#else
#define RLRUN_CPU_AVX2
#define RLRUN_CPU_AVX512
#endif
#define RLRUN_CPU_INLINE __attribute__((always_inline)) inline

namespace rlrun::engine::cpu {

// exp(x) for float, written so that `#pragma omp simd` loops vectorise it (no libm call).
// Cephes' expf: exp(x) = 2^n exp(r), r = x - n ln2 in [-ln2/2, ln2/2], degree-5 polynomial;
// ~1e-7 relative error over the normal range. Returns 0 below -87.3 (including -inf); saturates at
// exp(88) above 88 (callers never pass positive arguments).
RLRUN_CPU_INLINE float fast_exp(float x) {
  const float hi = 88.0f, lo = -87.3365f;  // callers pass x <= 0 (max- or lse-shifted)
  const float xc = x < lo ? lo : (x > hi ? hi : x);  // no std::min: see RLRUN_CPU_INLINE
  // n = round(xc * log2(e)) via the 1.5 * 2^23 trick (no SSE4.1 round instruction needed).
  const float shifter = 12582912.0f;
  const float nf = (xc * 1.44269504088896341f + shifter) - shifter;
  float r = xc - nf * 0.693359375f;  // ln2 split in two for an exact product
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union {
    int32_t bits;
    float value;
  } scale;  // 2^n built from its exponent bits (GCC defines union type punning)
  scale.bits = (static_cast<int32_t>(nf) + 127) << 23;
  return x < lo ? 0.0f : p * scale.value;
}

}  // namespace rlrun::engine::cpu
