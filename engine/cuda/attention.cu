// attention.cu - causal grouped-query attention forward, flash-attention style, over packed
// sequences (training) and over a paged KV cache (prefill and decode). Tiling: attention_tiles.cuh.
//
// Online softmax per slot: running max m, running sum l and an (unnormalised) output row; each
// K/V tile rescales them by exp(m_old - m_new). lse = m + log l is saved for backward.
// The packed and paged kernels differ only in where key j of the sequence lives (a template flag).
#include <cmath>

#include "engine/cuda/attention_tiles.cuh"

namespace rlrun::engine::cuda {

using namespace attention;

namespace {

struct ForwardArgs {
  bf16* out;
  float* lse;  // null: not saved
  const bf16* q;
  const bf16* k;  // packed k, or the paged k cache
  const bf16* v;
  const int32_t* cu;  // cu_seqlens (packed) or cu_q (paged)
  PagedKv paged;
  int* err;
  int hq, hkv, d, group;
  float scale;
  int64_t n, max_rows;
  int64_t window;  // > 0: sliding window (keys pos - window + 1 .. pos)
  int num_seqs;
};

size_t forward_smem_bytes(int d) {
  return sizeof(float) * (static_cast<size_t>(kSlots) * d + static_cast<size_t>(kKeys) * (d + 1) +
                          static_cast<size_t>(kKeys) * d);
}

template <bool kPaged>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(ForwardArgs a) {
  extern __shared__ float smem[];
  const int d = a.d, ldk = d + 1;  // K rows padded: lane j reads row j, conflict-free
  float* qs = smem;                // (kSlots, d), pre-scaled by 1/sqrt(d)
  float* ks = qs + kSlots * d;     // (kKeys, d + 1)
  float* vs = ks + kKeys * ldk;    // (kKeys, d)
  const int seq = blockIdx.z, g = blockIdx.y;
  const int64_t row0 = a.cu[seq], rows = a.cu[seq + 1] - row0;
  const int64_t pos0 = kPaged ? a.paged.seq_start[seq] : 0;  // position of the sequence's first query row
  const int64_t slot0 = int64_t{blockIdx.x} * kSlots, num_slots = rows * a.group;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
    check_cu_seqlens(a.cu, seq, a.num_seqs, a.n, a.max_rows, a.err);
  if (slot0 >= num_slots) return;
  const int64_t key_end = pos0 + (min(slot0 + kSlots, num_slots) - 1) / a.group + 1;  // keys any slot sees
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int idx = tid; idx < kSlots * d; idx += kThreads) {
    const int64_t t = slot0 + idx / d;
    float val = 0.0f;
    if (t < num_slots) {
      const int64_t row = row0 + t / a.group, h = int64_t{g} * a.group + t % a.group;
      val = __bfloat162float(a.q[(row * a.hq + h) * d + idx % d]) * a.scale;
    }
    qs[idx] = val;
  }
  float m[kSlotsPerWarp], l[kSlotsPerWarp], acc[kSlotsPerWarp][kPerLane];
  int64_t pos[kSlotsPerWarp];  // query position of each slot of this warp; -1 for an empty slot
#pragma unroll
  for (int i = 0; i < kSlotsPerWarp; ++i) {
    const int64_t t = slot0 + warp * kSlotsPerWarp + i;
    pos[i] = t < num_slots ? pos0 + t / a.group : -1;
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int cc = 0; cc < kPerLane; ++cc) acc[i][cc] = 0.0f;
  }

  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    __syncthreads();  // the previous tile is consumed (and, the first time, qs is written)
    for (int idx = tid; idx < kKeys * d; idx += kThreads) {
      const int j = idx / d, c = idx % d;
      const int64_t key = j0 + j;
      float kval = 0.0f, vval = 0.0f;
      if (key < key_end) {
        int64_t src = -1;  // element offset of (key, g, c)
        if constexpr (kPaged) {
          const int64_t entry = key / a.paged.block_size;
          const int64_t block = entry < a.paged.max_blocks ? a.paged.block_tables[seq * a.paged.max_blocks + entry] : -1;
          const int64_t slot = block * a.paged.block_size + key % a.paged.block_size;
          if (block >= 0 && slot < a.paged.num_slots)
            src = (slot * a.hkv + g) * d + c;
          else if (c == 0)
            atomicOr(a.err, kErrPagedSlot);
        } else {
          src = ((row0 + key) * a.hkv + g) * d + c;
        }
        if (src >= 0) {
          kval = __bfloat162float(a.k[src]);
          vval = __bfloat162float(a.v[src]);
        }
      }
      ks[j * ldk + c] = kval;
      vs[j * d + c] = vval;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSlotsPerWarp; ++i) {
      if (pos[i] < j0) continue;  // empty slot, or every key of the tile is in its future (warp-uniform)
      const int64_t first = a.window > 0 ? pos[i] - a.window + 1 : 0;  // the window's first key
      if (j0 + kKeys <= first) continue;  // every key of the tile is before the window (warp-uniform)
      const float* qrow = qs + (warp * kSlotsPerWarp + i) * d;
      const int64_t key = j0 + lane;
      const bool seen = key <= pos[i] && key >= first;
      const float score = seen ? dot_shared(qrow, ks + lane * ldk, d) : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(score));  // finite: the tile holds a visible key
      const float p = seen ? expf(score - m_new) : 0.0f;
      const float correction = expf(m[i] - m_new);  // 0 on the first tile (m = -inf)
      l[i] = l[i] * correction + warp_sum(p);
#pragma unroll
      for (int cc = 0; cc < kPerLane; ++cc) acc[i][cc] *= correction;
      const int visible = static_cast<int>(pos[i] - j0 + 1 < kKeys ? pos[i] - j0 + 1 : kKeys);
      accumulate_rows(acc[i], p, vs, d, d, visible, lane);
      m[i] = m_new;
    }
  }

#pragma unroll
  for (int i = 0; i < kSlotsPerWarp; ++i) {
    if (pos[i] < 0) continue;
    const int64_t t = slot0 + warp * kSlotsPerWarp + i;
    const int64_t row = row0 + t / a.group, h = int64_t{g} * a.group + t % a.group;
    const float inv = 1.0f / l[i];
    bf16* orow = a.out + (row * a.hq + h) * d;
#pragma unroll
    for (int cc = 0; cc < kPerLane; ++cc) {
      const int c = lane + 32 * cc;
      if (c < d) orow[c] = __float2bfloat16_rn(acc[i][cc] * inv);
    }
    if (a.lse != nullptr && lane == 0) a.lse[row * a.hq + h] = m[i] + logf(l[i]);
  }
}

template <bool kPaged>
void launch_forward(const ForwardArgs& args, const AttentionDims& dims, cudaStream_t stream) {
  if (dims.n == 0 || dims.num_seqs == 0) return;
  allow_shared_memory(attention_forward_kernel<kPaged>, forward_smem_bytes(dims.d));
  const int64_t slot_tiles = (dims.max_rows * args.group + kSlots - 1) / kSlots;
  const dim3 grid(static_cast<unsigned>(slot_tiles < 1 ? 1 : slot_tiles), dims.hkv, dims.num_seqs);
  attention_forward_kernel<kPaged><<<grid, kThreads, forward_smem_bytes(dims.d), stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

ForwardArgs base_args(bf16* out, const bf16* q, const AttentionDims& dims) {
  ForwardArgs a{};
  a.out = out;
  a.q = q;
  a.hq = dims.hq;
  a.hkv = dims.hkv;
  a.d = dims.d;
  a.group = dims.hq / dims.hkv;
  a.scale = 1.0f / sqrtf(static_cast<float>(dims.d));
  a.n = dims.n;
  a.max_rows = dims.max_rows;
  a.window = dims.window;
  a.num_seqs = dims.num_seqs;
  return a;
}

}  // namespace

void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const int32_t* cu_seqlens,
                       const AttentionDims& dims, int* err, cudaStream_t stream) {
  ForwardArgs a = base_args(out, q, dims);
  a.err = err;
  a.lse = lse;
  a.k = k;
  a.v = v;
  a.cu = cu_seqlens;
  launch_forward<false>(a, dims, stream);
}

void paged_attention_forward(bf16* out, const bf16* q, const int32_t* cu_q, const PagedKv& kv,
                             const AttentionDims& dims, int* err, cudaStream_t stream) {
  ForwardArgs a = base_args(out, q, dims);
  a.k = kv.k_cache;
  a.v = kv.v_cache;
  a.cu = cu_q;
  a.paged = kv;
  a.err = err;
  launch_forward<true>(a, dims, stream);
}

}  // namespace rlrun::engine::cuda
