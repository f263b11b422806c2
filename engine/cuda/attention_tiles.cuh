// attention_tiles.cuh - the tiling shared by the attention kernels (attention.cu, attention_backward.cu).
//
// A block works for ONE sequence and ONE kv head. Its query side is a tile of kSlots "slots", a
// slot being a (query row, query head of the group) pair numbered row-major (slot = row * group +
// head in group), so the query heads that share a kv head share every K/V tile the block loads
// (decode with group size 7 fills 7 of the 16 slots with one token). Each of the kWarps warps
// owns kSlotsPerWarp slots. Keys come in tiles of kKeys = 32, one key per lane when scores are
// computed; values are accumulated with each lane owning head-dim columns lane, lane + 32, ...
// Nothing larger than a (kSlots, kKeys) score tile exists: never a seq_len x seq_len matrix.
// All arithmetic is f32 (tiles are widened from bf16 when loaded into shared memory).
#pragma once

#include "engine/cuda/common.cuh"
#include "engine/cuda/kernels.h"

namespace rlrun::engine::cuda::attention {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kSlotsPerWarp = 4;
constexpr int kSlots = kWarps * kSlotsPerWarp;
constexpr int kKeys = 32;
constexpr int kPerLane = kAttentionMaxHeadDim / 32;  // head-dim columns per lane

// dot(a[0:d], b[0:d]) with both operands in shared memory.
__device__ __forceinline__ float dot_shared(const float* a, const float* b, int d) {
  float s = 0.0f;
  for (int c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

// acc[cc] += sum_{jj < count} w_jj * tile[jj * ld + lane + 32 cc], where w_jj is lane jj's `w`.
__device__ __forceinline__ void accumulate_rows(float (&acc)[kPerLane], float w, const float* tile, int ld, int d,
                                               int count, int lane) {
  for (int jj = 0; jj < count; ++jj) {
    const float wj = __shfl_sync(0xffffffffu, w, jj);
#pragma unroll
    for (int cc = 0; cc < kPerLane; ++cc) {
      const int c = lane + 32 * cc;
      if (c < d) acc[cc] += wj * tile[jj * ld + c];
    }
  }
}

// Called by one thread per sequence: flags kErrCuSeqlens unless cu[0] = 0, the sequence's row count
// is in [0, max_rows] (the launch covers max_rows rows) and the last entry is n.
__device__ __forceinline__ void check_cu_seqlens(const int32_t* cu, int seq, int num_seqs, int64_t n,
                                                 int64_t max_rows, int* err) {
  const int64_t rows = cu[seq + 1] - cu[seq];
  if ((seq == 0 && cu[0] != 0) || rows < 0 || rows > max_rows || (seq == num_seqs - 1 && cu[seq + 1] != n))
    atomicOr(err, kErrCuSeqlens);
}

}  // namespace rlrun::engine::cuda::attention
