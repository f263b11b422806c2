// attention_backward.cu - causal grouped-query attention backward over packed sequences,
// flash-attention-2 style: probabilities are recomputed from the saved lse, never stored.
//
//   p_ij = exp(scale q_i.k_j - lse_i),  dp_ij = dout_i.v_j,  ds_ij = p_ij (dp_ij - delta_i),
//   delta_i = dout_i.out_i,  dv_j = sum_i p_ij dout_i,  dk_j = scale sum_i ds_ij q_i,
//   dq_i = scale sum_j ds_ij k_j.
// Three kernels, no atomics (deterministic): delta per (row, head); dK/dV with a block owning a
// tile of 32 keys of one kv head (accumulators in shared memory, summed over every later query
// row of every query head of the group); dQ with the forward's tiling (attention_tiles.cuh),
// recomputing the scores a second time instead of adding dq with atomics.
// Sliding window (window > 0): query i sees keys i - window + 1 .. i; p_ij = 0 outside, so a key
// tile's dK/dV visit only the rows whose window reaches it, and dQ only the key tiles in its window.
#include <cmath>

#include "engine/cuda/attention_tiles.cuh"

namespace rlrun::engine::cuda {

using namespace attention;

namespace {

struct BackwardArgs {
  bf16 *dq, *dk, *dv;
  const float* delta;
  const bf16 *dout, *q, *k, *v;
  const float* lse;
  const int32_t* cu;
  int hq, hkv, d, group;
  float scale;
  int64_t n, max_rows;
  int num_seqs;
  int* err;
  int64_t window;  // > 0: sliding window (AttentionDims::window)
};

// delta (n, hq) = rowwise dot(dout, out): one warp per (row, head).
__global__ void attention_delta_kernel(float* delta, const bf16* dout, const bf16* out, int64_t rows, int d) {
  const int64_t r = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  if (r >= rows) return;
  float s = 0.0f;
  for (int c = threadIdx.x % 32; c < d; c += 32)
    s += __bfloat162float(dout[r * d + c]) * __bfloat162float(out[r * d + c]);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) delta[r] = s;
}

size_t dkdv_smem_bytes(int d) {
  return sizeof(float) * (2 * static_cast<size_t>(kKeys) * (d + 1) + 2 * static_cast<size_t>(kKeys) * d +
                          2 * static_cast<size_t>(kSlots) * d + 2 * static_cast<size_t>(kSlots) * kKeys + 2 * kSlots);
}

size_t dq_smem_bytes(int d) {
  return sizeof(float) * (2 * static_cast<size_t>(kSlots) * d + 2 * static_cast<size_t>(kKeys) * (d + 1));
}

// Block: keys [key0, key0 + 32) of sequence blockIdx.z, kv head blockIdx.y. Query slots run over
// rows key0 .. row_end - 1 (earlier rows cannot see these keys, nor can rows whose window starts
// after them) and the group's query heads.
__global__ void __launch_bounds__(kThreads) attention_dkdv_kernel(BackwardArgs a) {
  extern __shared__ float smem[];
  __shared__ int64_t pos_s[kSlots];  // query position of each slot in the sequence; -1: empty
  const int d = a.d, ld = d + 1;
  float* ks = smem;               // (kKeys, d + 1)
  float* vs = ks + kKeys * ld;    // (kKeys, d + 1)
  float* dks = vs + kKeys * ld;   // (kKeys, d) accumulators
  float* dvs = dks + kKeys * d;   // (kKeys, d)
  float* qs = dvs + kKeys * d;    // (kSlots, d)
  float* dos = qs + kSlots * d;   // (kSlots, d)
  float* ps = dos + kSlots * d;   // (kSlots, kKeys)
  float* dss = ps + kSlots * kKeys;
  float* lse_s = dss + kSlots * kKeys;  // (kSlots)
  float* delta_s = lse_s + kSlots;
  const int seq = blockIdx.z, g = blockIdx.y;
  const int64_t row0 = a.cu[seq], len = a.cu[seq + 1] - row0;
  const int64_t key0 = int64_t{blockIdx.x} * kKeys;
  if (key0 >= len) return;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int idx = tid; idx < kKeys * d; idx += kThreads) {
    const int j = idx / d, c = idx % d;
    const int64_t key = key0 + j;
    const int64_t src = ((row0 + key) * a.hkv + g) * d + c;
    ks[j * ld + c] = key < len ? __bfloat162float(a.k[src]) : 0.0f;
    vs[j * ld + c] = key < len ? __bfloat162float(a.v[src]) : 0.0f;
    dks[idx] = 0.0f;
    dvs[idx] = 0.0f;
  }
  const int64_t row_end = a.window > 0 && key0 + kKeys - 1 + a.window < len ? key0 + kKeys - 1 + a.window : len;
  const int64_t num_slots = (row_end - key0) * a.group;
  for (int64_t t0 = 0; t0 < num_slots; t0 += kSlots) {
    __syncthreads();  // the previous slot tile is consumed (and ks, vs are loaded)
    for (int idx = tid; idx < kSlots * d; idx += kThreads) {
      const int slot = idx / d, c = idx % d;
      const int64_t t = t0 + slot;
      float qv = 0.0f, dov = 0.0f;
      if (t < num_slots) {
        const int64_t row = row0 + key0 + t / a.group, h = int64_t{g} * a.group + t % a.group;
        qv = __bfloat162float(a.q[(row * a.hq + h) * d + c]);
        dov = __bfloat162float(a.dout[(row * a.hq + h) * d + c]);
        if (c == 0) {
          lse_s[slot] = a.lse[row * a.hq + h];
          delta_s[slot] = a.delta[row * a.hq + h];
          pos_s[slot] = key0 + t / a.group;
        }
      } else if (c == 0) {
        pos_s[slot] = -1;
      }
      qs[idx] = qv;
      dos[idx] = dov;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSlotsPerWarp; ++i) {
      const int slot = warp * kSlotsPerWarp + i;
      const int64_t qpos = pos_s[slot], key = key0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (qpos >= 0 && key < len && key <= qpos && (a.window <= 0 || qpos - key < a.window)) {
        const float score = a.scale * dot_shared(qs + slot * d, ks + lane * ld, d);
        p = expf(score - lse_s[slot]);
        ds = p * (dot_shared(dos + slot * d, vs + lane * ld, d) - delta_s[slot]);
      }
      ps[slot * kKeys + lane] = p;
      dss[slot * kKeys + lane] = ds;
    }
    __syncthreads();
    for (int idx = tid; idx < kKeys * d; idx += kThreads) {
      const int j = idx / d, c = idx % d;
      float av = 0.0f, ak = 0.0f;
#pragma unroll 4
      for (int t = 0; t < kSlots; ++t) {
        av += ps[t * kKeys + j] * dos[t * d + c];
        ak += dss[t * kKeys + j] * qs[t * d + c];
      }
      dvs[idx] += av;
      dks[idx] += a.scale * ak;
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kKeys * d; idx += kThreads) {
    const int j = idx / d, c = idx % d;
    const int64_t key = key0 + j;
    if (key >= len) continue;
    const int64_t dst = ((row0 + key) * a.hkv + g) * d + c;
    a.dk[dst] = __float2bfloat16_rn(dks[idx]);
    a.dv[dst] = __float2bfloat16_rn(dvs[idx]);
  }
}

// Block: the forward's slot tile (rows x query heads of kv head blockIdx.y) of sequence blockIdx.z.
__global__ void __launch_bounds__(kThreads) attention_dq_kernel(BackwardArgs a) {
  extern __shared__ float smem[];
  const int d = a.d, ld = d + 1;
  float* qs = smem;              // (kSlots, d)
  float* dos = qs + kSlots * d;  // (kSlots, d)
  float* ks = dos + kSlots * d;  // (kKeys, d + 1)
  float* vs = ks + kKeys * ld;   // (kKeys, d + 1)
  const int seq = blockIdx.z, g = blockIdx.y;
  const int64_t row0 = a.cu[seq], rows = a.cu[seq + 1] - row0;
  const int64_t slot0 = int64_t{blockIdx.x} * kSlots, num_slots = rows * a.group;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
    check_cu_seqlens(a.cu, seq, a.num_seqs, a.n, a.max_rows, a.err);
  if (slot0 >= num_slots) return;
  const int64_t key_end = (min(slot0 + kSlots, num_slots) - 1) / a.group + 1;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int idx = tid; idx < kSlots * d; idx += kThreads) {
    const int64_t t = slot0 + idx / d;
    float qv = 0.0f, dov = 0.0f;
    if (t < num_slots) {
      const int64_t row = row0 + t / a.group, h = int64_t{g} * a.group + t % a.group;
      qv = __bfloat162float(a.q[(row * a.hq + h) * d + idx % d]);
      dov = __bfloat162float(a.dout[(row * a.hq + h) * d + idx % d]);
    }
    qs[idx] = qv;
    dos[idx] = dov;
  }
  float acc[kSlotsPerWarp][kPerLane], lse_r[kSlotsPerWarp], delta_r[kSlotsPerWarp];
  int64_t pos[kSlotsPerWarp];
#pragma unroll
  for (int i = 0; i < kSlotsPerWarp; ++i) {
    const int64_t t = slot0 + warp * kSlotsPerWarp + i;
    pos[i] = t < num_slots ? t / a.group : -1;
    const int64_t row = row0 + t / a.group, h = int64_t{g} * a.group + t % a.group;
    lse_r[i] = t < num_slots ? a.lse[row * a.hq + h] : 0.0f;
    delta_r[i] = t < num_slots ? a.delta[row * a.hq + h] : 0.0f;
#pragma unroll
    for (int cc = 0; cc < kPerLane; ++cc) acc[i][cc] = 0.0f;
  }

  // The first key any row of the tile sees: with a window, earlier key tiles are skipped whole.
  const int64_t key_begin = a.window > 0 && slot0 / a.group - a.window + 1 > 0 ? slot0 / a.group - a.window + 1 : 0;
  for (int64_t j0 = key_begin / kKeys * kKeys; j0 < key_end; j0 += kKeys) {
    __syncthreads();
    for (int idx = tid; idx < kKeys * d; idx += kThreads) {
      const int j = idx / d, c = idx % d;
      const int64_t key = j0 + j;
      const int64_t src = ((row0 + key) * a.hkv + g) * d + c;
      ks[j * ld + c] = key < key_end ? __bfloat162float(a.k[src]) : 0.0f;
      vs[j * ld + c] = key < key_end ? __bfloat162float(a.v[src]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSlotsPerWarp; ++i) {
      if (pos[i] < j0) continue;  // warp-uniform
      const int64_t first = a.window > 0 ? pos[i] - a.window + 1 : 0;  // the window's first key
      if (j0 + kKeys <= first) continue;  // every key of the tile is before the window (warp-uniform)
      const int slot = warp * kSlotsPerWarp + i;
      const int64_t key = j0 + lane;
      float ds = 0.0f;
      if (key <= pos[i] && key >= first) {
        const float p = expf(a.scale * dot_shared(qs + slot * d, ks + lane * ld, d) - lse_r[i]);
        ds = p * (dot_shared(dos + slot * d, vs + lane * ld, d) - delta_r[i]);
      }
      const int visible = static_cast<int>(pos[i] - j0 + 1 < kKeys ? pos[i] - j0 + 1 : kKeys);
      accumulate_rows(acc[i], ds, ks, ld, d, visible, lane);
    }
  }

#pragma unroll
  for (int i = 0; i < kSlotsPerWarp; ++i) {
    if (pos[i] < 0) continue;
    const int64_t t = slot0 + warp * kSlotsPerWarp + i;
    const int64_t row = row0 + t / a.group, h = int64_t{g} * a.group + t % a.group;
    bf16* dqrow = a.dq + (row * a.hq + h) * d;
#pragma unroll
    for (int cc = 0; cc < kPerLane; ++cc) {
      const int c = lane + 32 * cc;
      if (c < d) dqrow[c] = __float2bfloat16_rn(a.scale * acc[i][cc]);
    }
  }
}

}  // namespace

void attention_backward(bf16* dq, bf16* dk, bf16* dv, float* delta, const bf16* dout, const bf16* q, const bf16* k,
                        const bf16* v, const bf16* out, const float* lse, const int32_t* cu_seqlens,
                        const AttentionDims& dims, int* err, cudaStream_t stream) {
  if (dims.n == 0 || dims.num_seqs == 0) return;
  allow_shared_memory(attention_dkdv_kernel, dkdv_smem_bytes(dims.d));
  allow_shared_memory(attention_dq_kernel, dq_smem_bytes(dims.d));
  const int64_t rows = dims.n * dims.hq;
  attention_delta_kernel<<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      delta, dout, out, rows, dims.d);
  CUDA_CHECK_LAUNCH();

  BackwardArgs a{dq,      dk,       dv,      delta,         dout,          q,
                 k,       v,        lse,     cu_seqlens,    dims.hq,       dims.hkv,
                 dims.d,  dims.hq / dims.hkv, 1.0f / sqrtf(static_cast<float>(dims.d)),
                 dims.n,  dims.max_rows,      dims.num_seqs, err, dims.window};
  const int64_t key_tiles = (dims.max_rows + kKeys - 1) / kKeys;
  const dim3 kv_grid(static_cast<unsigned>(key_tiles < 1 ? 1 : key_tiles), dims.hkv, dims.num_seqs);
  attention_dkdv_kernel<<<kv_grid, kThreads, dkdv_smem_bytes(dims.d), stream>>>(a);
  CUDA_CHECK_LAUNCH();
  const int64_t slot_tiles = (dims.max_rows * a.group + kSlots - 1) / kSlots;
  const dim3 q_grid(static_cast<unsigned>(slot_tiles < 1 ? 1 : slot_tiles), dims.hkv, dims.num_seqs);
  attention_dq_kernel<<<q_grid, kThreads, dq_smem_bytes(dims.d), stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace rlrun::engine::cuda
