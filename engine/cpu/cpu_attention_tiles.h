// cpu_attention_tiles.h - what the CPU attention files (training, paged) share: the tile layout,
// 8-lane vectors, per-thread scratch and the forward row kernel. Internal to engine/cpu.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/cpu_math.h"

// F8 (below) is passed by value only between always-inlined functions, so the AVX calling
// convention GCC warns about (-Wpsabi) never applies. This internal header is included only by
// the attention .cc files, for which the warning is off from here on.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace rlrun::engine::cpu::attn {

constexpr int kRows = 4;             // query rows per micro-kernel call
constexpr int64_t kLanes = 8;        // key columns per register vector (AVX2 width; tiles pad to it)

struct AttnDims {
  int64_t n, hq, hkv, d, group, num_seqs;
  int64_t window = 0;  // > 0: a row sees only its last `window` columns (sliding-window layers)
};

// The first tile column a row that sees `visible` columns [0, visible) may read.
inline int64_t first_visible(const AttnDims& a, int64_t visible) {
  return a.window > 0 && visible > a.window ? visible - a.window : 0;
}

inline int64_t round_up(int64_t x) { return (x + kLanes - 1) / kLanes * kLanes; }

// 8 floats as one value: GCC lowers it to one AVX register in the Haswell clone and two SSE
// registers in the baseline one. Loads and stores go through memcpy (no alignment assumed).
typedef float F8 __attribute__((vector_size(32)));
RLRUN_CPU_INLINE F8 load8(const float* p) {
  F8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
RLRUN_CPU_INLINE void store8(float* p, F8 v) { __builtin_memcpy(p, &v, sizeof v); }
RLRUN_CPU_INLINE float sum8(F8 v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

struct Buffers {  // per-thread scratch
  std::vector<float> kt, vt, dkt, dvt, s, ds, zero, trash;
  Buffers(int64_t max_len, int64_t d, bool backward)
      : kt(round_up(max_len) * d), vt(round_up(max_len) * d), dkt(backward ? round_up(max_len) * d : 0),
        dvt(backward ? round_up(max_len) * d : 0), s(kRows * round_up(max_len)),
        ds(backward ? kRows * round_up(max_len) : 0), zero(d, 0.0f), trash(kRows * d) {}
};

// dst (D, ld) = rows [begin, begin + len) of kv head g of src (N, Hkv, D), transposed; columns
// [len, ld) zeroed.
void gather_transposed(float* dst, int64_t ld, const float* src, int64_t begin, int64_t len, int64_t hkv, int64_t g,
                       int64_t d);

// Query rows [row0, row1), for every query head of kv head g, against the keys and values already
// gathered in buf.kt, buf.vt (D, ld): row i sees tile columns [0, i - key0 + 1) (causal), the
// last a.window of them with a window. Writes
// out rows and, when lse is not null, their logsumexp. avx2 picks the AVX2+FMA variant.
void forward_rows(bool avx2, const AttnDims& a, const float* q, int64_t ld, int64_t key0, int64_t row0, int64_t row1,
                  int64_t g, float* out, float* lse, Buffers& buf);

}  // namespace rlrun::engine::cpu::attn
