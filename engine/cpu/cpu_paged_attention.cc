// cpu_paged_attention.cc - attention of new tokens over a paged KV cache (prefill and decode).
//
// Task = (sequence, kv head). A sequence with one new row (decode) reads each cached K/V row once,
// in place, for all the query heads of the group: decode is bound by reading the cache. A sequence
// with several new rows (prefill) gathers its context through the block table into transposed
// tiles and runs the training forward kernel (cpu_attention_tiles.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "common/check.h"
#include "engine/cpu/cpu_attention_tiles.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_math.h"

namespace rlrun::engine::cpu {

using namespace attn;

namespace {

// dst (D, ld) = positions [0, len) of one sequence's kv head g in a paged cache (slots, Hkv, D),
// transposed; columns [len, ld) zeroed. Aborts on a slot outside the cache.
void gather_paged_transposed(float* dst, int64_t ld, const float* cache, int64_t num_slots, const int32_t* table,
                             int64_t block_size, int64_t len, int64_t hkv, int64_t g, int64_t d) {
  for (int64_t p = 0; p < len; ++p) {
    const int64_t slot = static_cast<int64_t>(table[p / block_size]) * block_size + p % block_size;
    RLRUN_CHECK(slot >= 0 && slot < num_slots, "paged_attention_forward: position " + std::to_string(p) +
                                                   " maps to slot " + std::to_string(slot) + " outside the cache");
    const float* row = cache + (slot * hkv + g) * d;
    for (int64_t c = 0; c < d; ++c) dst[c * ld + p] = row[c];
  }
  for (int64_t c = 0; c < d; ++c) std::fill(dst + c * ld + len, dst + (c + 1) * ld, 0.0f);
}

// dot(a, b) over d floats, 8 lanes at a time.
RLRUN_CPU_INLINE float dot_row(const float* a, const float* b, int64_t d) {
  F8 acc = {};
  int64_t c = 0;
  for (; c + kLanes <= d; c += kLanes) acc += load8(a + c) * load8(b + c);
  float sum = sum8(acc);
  for (; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

// y[0:d] += alpha * x[0:d]
RLRUN_CPU_INLINE void axpy_row(float* y, float alpha, const float* x, int64_t d) {
  int64_t c = 0;
  for (; c + kLanes <= d; c += kLanes) store8(y + c, load8(y + c) + alpha * load8(x + c));
  for (; c < d; ++c) y[c] += alpha * x[c];
}

// Decode: the single new row of a sequence (at position ctx - 1), for the query heads of kv head
// g. Each cached K and V row is read once, in place, for the whole group: decode is bound by
// reading the cache, so no tile is built. scores: (group, ctx) scratch.
RLRUN_CPU_INLINE void decode_row_body(const AttnDims& a, const float* q_row, const float* kc, const float* vc,
                                      const int32_t* table, int64_t block_size, int64_t ctx, int64_t g,
                                      float* out_row, float* scores) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.d));
  const float* q0 = q_row + g * a.group * a.d;
  float* o0 = out_row + g * a.group * a.d;
  const int64_t first = first_visible(a, ctx);  // positions before it are outside the window: never read
  // Positions walk the block table a block at a time (no division per position).
  for (int64_t b = first / block_size, p0 = b * block_size; p0 < ctx; p0 += block_size, ++b) {
    const int64_t end = p0 + block_size < ctx ? p0 + block_size : ctx, p1 = p0 < first ? first : p0;
    const float* k = kc + ((static_cast<int64_t>(table[b]) * block_size + p1 - p0) * a.hkv + g) * a.d;
    for (int64_t p = p1; p < end; ++p, k += a.hkv * a.d)
      for (int64_t h = 0; h < a.group; ++h) scores[h * ctx + p] = scale * dot_row(q0 + h * a.d, k, a.d);
  }
  for (int64_t h = 0; h < a.group; ++h) {
    float* sh = scores + h * ctx;
    float m = -INFINITY;
    for (int64_t p = first; p < ctx; ++p) m = sh[p] > m ? sh[p] : m;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t p = first; p < ctx; ++p) {
      sh[p] = fast_exp(sh[p] - m);
      sum += sh[p];
    }
    const float inv = 1.0f / sum;
    for (int64_t p = first; p < ctx; ++p) sh[p] *= inv;
    for (int64_t c = 0; c < a.d; ++c) o0[h * a.d + c] = 0.0f;
  }
  for (int64_t b = first / block_size, p0 = b * block_size; p0 < ctx; p0 += block_size, ++b) {
    const int64_t end = p0 + block_size < ctx ? p0 + block_size : ctx, p1 = p0 < first ? first : p0;
    const float* v = vc + ((static_cast<int64_t>(table[b]) * block_size + p1 - p0) * a.hkv + g) * a.d;
    for (int64_t p = p1; p < end; ++p, v += a.hkv * a.d)
      for (int64_t h = 0; h < a.group; ++h) axpy_row(o0 + h * a.d, scores[h * ctx + p], v, a.d);
  }
}

RLRUN_CPU_AVX2 void decode_row_avx2(const AttnDims& a, const float* q_row, const float* kc, const float* vc,
                                    const int32_t* table, int64_t block_size, int64_t ctx, int64_t g, float* out_row,
                                    float* scores) {
  decode_row_body(a, q_row, kc, vc, table, block_size, ctx, g, out_row, scores);
}

void decode_row_base(const AttnDims& a, const float* q_row, const float* kc, const float* vc, const int32_t* table,
                     int64_t block_size, int64_t ctx, int64_t g, float* out_row, float* scores) {
  decode_row_body(a, q_row, kc, vc, table, block_size, ctx, g, out_row, scores);
}

}  // namespace

namespace {

// The dimensions of a call whose shapes Backend has checked, after checking what only the data
// shows: the batch description (cu_q, seq_start within max_context and the table) and every
// block a read will touch (aborting with the culprit named).
AttnDims check_paged(const Tensor& q, const Tensor& k_cache, const Tensor& cu_q, const Tensor& seq_start,
                     const Tensor& block_tables, int64_t block_size, int64_t max_context) {
  const char* op = "paged_attention_forward";
  AttnDims a{q.dim(0), q.dim(1), k_cache.dim(1), q.dim(2), q.dim(1) / k_cache.dim(1), cu_q.dim(0) - 1};
  const int32_t *cu = cu_q.i32(), *start = seq_start.i32(), *tables = block_tables.i32();
  const int64_t max_blocks = block_tables.dim(1);
  RLRUN_CHECK(cu[0] == 0 && cu[a.num_seqs] == a.n, std::string(op) + ": cu_q must run from 0 to " +
                                                       std::to_string(a.n));
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t ctx = int64_t{start[s]} + cu[s + 1] - cu[s];
    RLRUN_CHECK(start[s] >= 0 && cu[s + 1] >= cu[s] && ctx <= max_context && ctx <= max_blocks * block_size,
                std::string(op) + ": sequence " + std::to_string(s) + " has context " + std::to_string(ctx) +
                    ", max_context " + std::to_string(max_context) + ", table room " +
                    std::to_string(max_blocks * block_size));
  }
  const int64_t num_slots = k_cache.dim(0);
  for (int64_t s = 0; s < a.num_seqs; ++s) {  // every slot read must lie in the cache
    const int64_t ctx = int64_t{start[s]} + cu[s + 1] - cu[s];
    for (int64_t b = 0; b < (ctx + block_size - 1) / block_size; ++b) {
      const int64_t block = tables[s * max_blocks + b];
      RLRUN_CHECK(block >= 0 && (block + 1) * block_size <= num_slots,
                  std::string(op) + ": sequence " + std::to_string(s) + " uses block " + std::to_string(block) +
                      " outside the cache of " + std::to_string(num_slots) + " slots");
    }
  }
  return a;
}

}  // namespace

void CpuBackend::paged_attention_forward_impl(const Tensor& out, const Tensor& q, const Tensor& k_cache,
                                              const Tensor& v_cache, const Tensor& cu_q, const Tensor& seq_start,
                                              const Tensor& block_tables, int64_t block_size, int64_t max_context,
                                              int64_t window) {
  AttnDims a = check_paged(q, k_cache, cu_q, seq_start, block_tables, block_size, max_context);
  a.window = window;
  const int32_t *cu = cu_q.i32(), *start = seq_start.i32(), *tables = block_tables.i32();
  const int64_t max_blocks = block_tables.dim(1), num_slots = k_cache.dim(0);
  struct Task { int64_t seq, kv_head; };
  std::vector<Task> tasks;
  for (int64_t s = 0; s < a.num_seqs; ++s)
    for (int64_t g = 0; g < a.hkv; ++g)
      if (cu[s + 1] > cu[s]) tasks.push_back({s, g});
  const int64_t num_tasks = static_cast<int64_t>(tasks.size());
  const bool avx2 = avx2_;
#pragma omp parallel num_threads(threads_for(a.n * a.hq * max_context))
  {
    // Scratch is made when first needed: a decode step (every task one row) needs only the scores,
    // and tiles sized for max_context are large enough for malloc to map and unmap them each call.
    std::optional<Buffers> buf;
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < num_tasks; ++t) {
      const int64_t s = tasks[t].seq, g = tasks[t].kv_head;
      const int64_t ctx = int64_t{start[s]} + cu[s + 1] - cu[s], ld = round_up(ctx);
      if (cu[s + 1] - cu[s] == 1) {  // decode: one new row
        const int32_t* table = tables + s * max_blocks;
        const float* q_row = q.f32() + int64_t{cu[s]} * a.hq * a.d;
        float* out_row = out.f32() + int64_t{cu[s]} * a.hq * a.d;
        if (scores.empty()) scores.resize(static_cast<size_t>(a.group * std::max<int64_t>(max_context, 1)));
        if (avx2)
          decode_row_avx2(a, q_row, k_cache.f32(), v_cache.f32(), table, block_size, ctx, g, out_row, scores.data());
        else
          decode_row_base(a, q_row, k_cache.f32(), v_cache.f32(), table, block_size, ctx, g, out_row, scores.data());
        continue;
      }
      if (!buf) buf.emplace(std::max<int64_t>(max_context, 1), a.d, false);
      gather_paged_transposed(buf->kt.data(), ld, k_cache.f32(), num_slots, tables + s * max_blocks, block_size, ctx,
                              a.hkv, g, a.d);
      gather_paged_transposed(buf->vt.data(), ld, v_cache.f32(), num_slots, tables + s * max_blocks, block_size, ctx,
                              a.hkv, g, a.d);
      // Row cu[s] + r is at position start[s] + r, so it sees tile columns [0, row - key0 + 1).
      forward_rows(avx2, a, q.f32(), ld, int64_t{cu[s]} - start[s], cu[s], cu[s + 1], g, out.f32(), nullptr, *buf);
    }
  }
}

}  // namespace rlrun::engine::cpu
