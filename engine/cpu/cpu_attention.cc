// cpu_attention.cc - causal grouped-query attention over packed sequences on the CPU, optionally
// within a sliding window (columns before a row's window are masked like its future).
//
// The trick: each task copies the keys and values it reads, for one kv head, into transposed
// tiles kt, vt (D, ld) (ld = keys rounded up to 8, padding zeroed), and then works on 4 query
// rows at a time, so the inner loops are unit-stride over keys, keep their accumulators in
// registers and load each tile element once per 4 rows (a small register-blocked GEMM).
// Forward: task = (sequence, kv head, block of 64 query rows); each group of 4 rows of each query
// head builds a (4, keys) score tile, softmaxes each row, and reads the values. Nothing larger
// than 4 score rows per thread exists, and no score crosses a sequence boundary (the tiles only
// hold the sequence's own keys; keys after a row are masked).
// Backward: task = (sequence, kv head), which owns dk and dv of that head over the sequence (as
// transposed accumulators), so there are no atomics and results are deterministic; it recomputes
// probabilities from the saved logsumexp (p = exp(s - lse)) as flash-attention does.
// Paged attention (inference) lives in cpu_paged_attention.cc and shares forward_rows.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "engine/cpu/cpu_attention_tiles.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_math.h"


namespace rlrun::engine::cpu {
namespace attn {

namespace {

constexpr int64_t kQueryBlock = 64;  // query rows per forward task

// The dimensions of a call whose shapes Backend has checked, after checking what only the data
// shows: cu_seqlens runs from 0 to N and no sequence is longer than max_seqlen.
AttnDims check_cu_seqlens(const char* op, const Tensor& q, const Tensor& k, const Tensor& cu_seqlens,
                          int64_t max_seqlen) {
  AttnDims a{q.dim(0), q.dim(1), k.dim(1), q.dim(2), q.dim(1) / k.dim(1), 0};
  a.num_seqs = cu_seqlens.dim(0) - 1;
  const int32_t* cu = cu_seqlens.i32();
  RLRUN_CHECK(cu[0] == 0 && cu[a.num_seqs] == a.n, std::string(op) + ": cu_seqlens must run from 0 to N = " +
                                                       std::to_string(a.n));
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t len = cu[s + 1] - cu[s];
    RLRUN_CHECK(len >= 0 && len <= max_seqlen, std::string(op) + ": sequence " + std::to_string(s) + " has length " +
                                                   std::to_string(len) + ", max_seqlen is " +
                                                   std::to_string(max_seqlen));
  }
  return a;
}

// The first query row of each sequence: cu[s] + q_begin[s] (backend.h), or cu[s] without q_begin.
std::vector<int64_t> first_queries(const char* op, const int32_t* cu, int64_t num_seqs, const Tensor& q_begin) {
  std::vector<int64_t> first(cu, cu + num_seqs);
  if (!q_begin.defined()) return first;
  const int32_t* qb = q_begin.i32();
  for (int64_t s = 0; s < num_seqs; ++s) {
    RLRUN_CHECK(qb[s] >= 0 && qb[s] <= cu[s + 1] - cu[s], std::string(op) + ": q_begin of sequence " +
                                                              std::to_string(s) + " is " + std::to_string(qb[s]) +
                                                              ", outside its " + std::to_string(cu[s + 1] - cu[s]) +
                                                              " rows");
    first[static_cast<size_t>(s)] += qb[s];
  }
  return first;
}

}  // namespace

void gather_transposed(float* dst, int64_t ld, const float* src, int64_t begin, int64_t len, int64_t hkv, int64_t g,
                       int64_t d) {
  for (int64_t j = 0; j < len; ++j) {
    const float* row = src + ((begin + j) * hkv + g) * d;
    for (int64_t c = 0; c < d; ++c) dst[c * ld + j] = row[c];
  }
  for (int64_t c = 0; c < d; ++c) std::fill(dst + c * ld + len, dst + (c + 1) * ld, 0.0f);
}


namespace {

// The inverse for the first len columns: rows of kv head g of dst (N, Hkv, D) = src transposed.
void scatter_transposed(float* dst, const float* src, int64_t ld, int64_t begin, int64_t len, int64_t hkv, int64_t g,
                        int64_t d) {
  for (int64_t j = 0; j < len; ++j) {
    float* row = dst + ((begin + j) * hkv + g) * d;
    for (int64_t c = 0; c < d; ++c) row[c] = src[c * ld + j];
  }
}



// s (kRows, ld): s[r, j] = alpha * sum_c x[r][c] t[c, j] for j < n8 (a multiple of kLanes).
RLRUN_CPU_INLINE
void rows_times_tile(float* s, int64_t ld, const float* const* x, const float* t, int64_t n8, int64_t d,
                     float alpha) {
  const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
  for (int64_t j0 = 0; j0 < n8; j0 += kLanes) {
    F8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int64_t c = 0; c < d; ++c) {
      const F8 tc = load8(t + c * ld + j0);
      a0 += x0[c] * tc;
      a1 += x1[c] * tc;
      a2 += x2[c] * tc;
      a3 += x3[c] * tc;
    }
    store8(s + j0, alpha * a0);
    store8(s + ld + j0, alpha * a1);
    store8(s + 2 * ld + j0, alpha * a2);
    store8(s + 3 * ld + j0, alpha * a3);
  }
}

// out[r][c] = alpha[r] * sum_{j < n8} s[r, j] t[c, j]: the transpose of rows_times_tile.
RLRUN_CPU_INLINE
void rows_dot_tile(float* const* out, const float* s, int64_t ld, const float* t, int64_t n8, int64_t d,
                   const float* alpha) {
  const float *s0 = s, *s1 = s + ld, *s2 = s + 2 * ld, *s3 = s + 3 * ld;
  for (int64_t c = 0; c < d; ++c) {
    const float* tc = t + c * ld;
    F8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int64_t j0 = 0; j0 < n8; j0 += kLanes) {
      const F8 tv = load8(tc + j0);
      a0 += load8(s0 + j0) * tv;
      a1 += load8(s1 + j0) * tv;
      a2 += load8(s2 + j0) * tv;
      a3 += load8(s3 + j0) * tv;
    }
    out[0][c] = alpha[0] * sum8(a0);
    out[1][c] = alpha[1] * sum8(a1);
    out[2][c] = alpha[2] * sum8(a2);
    out[3][c] = alpha[3] * sum8(a3);
  }
}

// t[c, j] += sum_r x[r][c] s[r, j] for j < n8: a rank-4 update of the tile.
RLRUN_CPU_INLINE
void tile_add_rows(float* t, int64_t ld, const float* const* x, const float* s, int64_t n8, int64_t d) {
  const float *s0 = s, *s1 = s + ld, *s2 = s + 2 * ld, *s3 = s + 3 * ld;
  for (int64_t c = 0; c < d; ++c) {
    float* tc = t + c * ld;
    const float x0 = x[0][c], x1 = x[1][c], x2 = x[2][c], x3 = x[3][c];
    for (int64_t j0 = 0; j0 < n8; j0 += kLanes)
      store8(tc + j0, load8(tc + j0) + x0 * load8(s0 + j0) + x1 * load8(s1 + j0) + x2 * load8(s2 + j0) +
                          x3 * load8(s3 + j0));
  }
}

// Row r of s: entries outside [lo[r], n[r]) become 0; the others exp(s - shift[r]), over j < n8.
// Returns the row sums in sum[r]. shift is the row max (forward) or the saved lse (backward).
RLRUN_CPU_INLINE
void masked_exp(float* s, int64_t ld, const int64_t* lo, const int64_t* n, int64_t n8, const float* shift, float* sum) {
  for (int r = 0; r < kRows; ++r) {
    float* row = s + r * ld;
    const float sh = shift[r];
    const int64_t valid = n[r], first = lo[r];
    float total = 0.0f;
#pragma omp simd reduction(+ : total)
    for (int64_t j = 0; j < n8; ++j) {
      const float e = j >= first && j < valid ? fast_exp(row[j] - sh) : 0.0f;
      row[j] = e;
      total += e;
    }
    sum[r] = total;
  }
}

RLRUN_CPU_INLINE
float row_max(const float* s, int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}


// Query rows [row0, row1), for every query head of kv head g, against the keys and values already
// gathered in buf.kt, buf.vt (D, ld): row i sees tile columns [0, i - key0 + 1) (causal).
RLRUN_CPU_INLINE void forward_rows_body(const AttnDims& a, const float* q, int64_t ld, int64_t key0, int64_t row0,
                                        int64_t row1, int64_t g, float* out, float* lse, Buffers& buf) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.d));
  float* s = buf.s.data();
  for (int64_t h = g * a.group; h < (g + 1) * a.group; ++h)
    for (int64_t i0 = row0; i0 < row1; i0 += kRows) {
      const float* x[kRows];
      float* o[kRows];
      int64_t n[kRows], lo[kRows];
      float m[kRows], sum[kRows], inv[kRows];
      for (int r = 0; r < kRows; ++r) {
        const bool real = i0 + r < row1;  // a short last group is padded with zero rows
        const int64_t row = (i0 + r) * a.hq + h;
        x[r] = real ? q + row * a.d : buf.zero.data();
        o[r] = real ? out + row * a.d : buf.trash.data() + r * a.d;
        n[r] = real ? i0 + r - key0 + 1 : 1;
        lo[r] = first_visible(a, n[r]);
      }
      const int64_t n8 = round_up(std::min<int64_t>(i0 + kRows, row1) - key0);
      rows_times_tile(s, ld, x, buf.kt.data(), n8, a.d, scale);
      for (int r = 0; r < kRows; ++r) m[r] = row_max(s + r * ld + lo[r], n[r] - lo[r]);
      masked_exp(s, ld, lo, n, n8, m, sum);
      for (int r = 0; r < kRows; ++r) inv[r] = 1.0f / sum[r];
      rows_dot_tile(o, s, ld, buf.vt.data(), n8, a.d, inv);
      if (lse)
        for (int r = 0; r < kRows && i0 + r < row1; ++r) lse[(i0 + r) * a.hq + h] = m[r] + std::log(sum[r]);
    }
}

RLRUN_CPU_AVX2 void forward_rows_avx2(const AttnDims& a, const float* q, int64_t ld, int64_t key0, int64_t row0,
                                      int64_t row1, int64_t g, float* out, float* lse, Buffers& buf) {
  forward_rows_body(a, q, ld, key0, row0, row1, g, out, lse, buf);
}

void forward_rows_base(const AttnDims& a, const float* q, int64_t ld, int64_t key0, int64_t row0, int64_t row1,
                       int64_t g, float* out, float* lse, Buffers& buf) {
  forward_rows_body(a, q, ld, key0, row0, row1, g, out, lse, buf);
}

}  // namespace

void forward_rows(bool avx2, const AttnDims& a, const float* q, int64_t ld, int64_t key0, int64_t row0, int64_t row1,
                  int64_t g, float* out, float* lse, Buffers& buf) {
  if (avx2)
    forward_rows_avx2(a, q, ld, key0, row0, row1, g, out, lse, buf);
  else
    forward_rows_base(a, q, ld, key0, row0, row1, g, out, lse, buf);
}

}  // namespace attn

using namespace attn;

void CpuBackend::attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen, int64_t window,
                                        const Tensor& q_begin) {
  AttnDims a = check_cu_seqlens("attention_forward", q, k, cu_seqlens, max_seqlen);
  a.window = window;
  const int32_t* cu = cu_seqlens.i32();
  const std::vector<int64_t> first = first_queries("attention_forward", cu, a.num_seqs, q_begin);
  struct Task { int64_t seq, row0, kv_head, cost; };
  std::vector<Task> tasks;
  for (int64_t s = 0; s < a.num_seqs; ++s)
    for (int64_t r = first[s]; r < cu[s + 1]; r += kQueryBlock)
      for (int64_t g = 0; g < a.hkv; ++g) tasks.push_back({s, r, g, r - cu[s]});
  // Latest rows (most keys) first, so the dynamic schedule ends with the short tasks.
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& x, const Task& y) { return x.cost > y.cost; });
  const float *qq = q.f32(), *kk = k.f32(), *vv = v.f32();
  float* o = out.f32();
  float* ls = lse.defined() ? lse.f32() : nullptr;
  const int64_t num_tasks = static_cast<int64_t>(tasks.size());
  const bool avx2 = avx2_;
#pragma omp parallel num_threads(threads_for(a.n * a.hq * max_seqlen))
  {
    Buffers buf(std::max<int64_t>(max_seqlen, 1), a.d, false);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < num_tasks; ++t) {
      const Task& task = tasks[t];
      const int64_t begin = cu[task.seq], row1 = std::min<int64_t>(task.row0 + kQueryBlock, cu[task.seq + 1]);
      const int64_t len = row1 - begin, ld = round_up(len);  // the keys these rows can see
      gather_transposed(buf.kt.data(), ld, kk, begin, len, a.hkv, task.kv_head, a.d);
      gather_transposed(buf.vt.data(), ld, vv, begin, len, a.hkv, task.kv_head, a.d);
      forward_rows(avx2, a, qq, ld, begin, task.row0, row1, task.kv_head, o, ls, buf);
    }
  }
}

namespace {

struct BackwardArgs {
  const float *q, *k, *v, *out, *lse, *dout;
  float *dq, *dk, *dv;
};

// Sequence [begin, end), kv head g: dq for the group's query heads, dk and dv for head g. Rows
// before `first` are keys and values only (backend.h q_begin): their dq is zero.
// With p = exp(s - lse), dp_j = dout . v_j, D = dout . out = sum_j p_j dp_j, ds = p (dp - D):
//   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i,  dv_j = sum_i p_ij dout_i.
RLRUN_CPU_INLINE void backward_task_body(const AttnDims& a, const BackwardArgs& x, int64_t begin, int64_t first,
                                         int64_t end, int64_t g, Buffers& buf) {
  const int64_t len = end - begin, ld = round_up(len);
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.d));
  gather_transposed(buf.kt.data(), ld, x.k, begin, len, a.hkv, g, a.d);
  gather_transposed(buf.vt.data(), ld, x.v, begin, len, a.hkv, g, a.d);
  std::fill(buf.dkt.begin(), buf.dkt.begin() + ld * a.d, 0.0f);
  std::fill(buf.dvt.begin(), buf.dvt.begin() + ld * a.d, 0.0f);
  float *p = buf.s.data(), *ds = buf.ds.data();
  for (int64_t h = g * a.group; h < (g + 1) * a.group; ++h) {
    for (int64_t i = begin; i < first; ++i) std::fill_n(x.dq + (i * a.hq + h) * a.d, a.d, 0.0f);
    for (int64_t i0 = first; i0 < end; i0 += kRows) {
      const float *qr[kRows], *dor[kRows];
      float* dqr[kRows];
      int64_t n[kRows], lo[kRows];
      float lse[kRows], di[kRows], sum[kRows], ones[kRows];
      for (int r = 0; r < kRows; ++r) {
        const bool real = i0 + r < end;  // padding rows: zero q and dout, no keys -> contribute 0
        const int64_t row = (i0 + r) * a.hq + h;
        qr[r] = real ? x.q + row * a.d : buf.zero.data();
        dor[r] = real ? x.dout + row * a.d : buf.zero.data();
        dqr[r] = real ? x.dq + row * a.d : buf.trash.data() + r * a.d;
        n[r] = real ? i0 + r - begin + 1 : 0;
        lo[r] = first_visible(a, n[r]);
        lse[r] = real ? x.lse[row] : 0.0f;
        di[r] = 0.0f;
        if (real)
          for (int64_t c = 0; c < a.d; ++c) di[r] += dor[r][c] * x.out[row * a.d + c];
        ones[r] = 1.0f;
      }
      const int64_t n8 = round_up(std::min<int64_t>(i0 + kRows, end) - begin);
      rows_times_tile(p, ld, qr, buf.kt.data(), n8, a.d, scale);
      masked_exp(p, ld, lo, n, n8, lse, sum);
      rows_times_tile(ds, ld, dor, buf.vt.data(), n8, a.d, 1.0f);
      for (int r = 0; r < kRows; ++r) {
        float *dsr = ds + r * ld, *pr = p + r * ld;
        const float dr = di[r];
#pragma omp simd
        for (int64_t j = 0; j < n8; ++j) dsr[j] = pr[j] * (dsr[j] - dr) * scale;
      }
      rows_dot_tile(dqr, ds, ld, buf.kt.data(), n8, a.d, ones);
      tile_add_rows(buf.dkt.data(), ld, qr, ds, n8, a.d);
      tile_add_rows(buf.dvt.data(), ld, dor, p, n8, a.d);
    }
  }
  scatter_transposed(x.dk, buf.dkt.data(), ld, begin, len, a.hkv, g, a.d);
  scatter_transposed(x.dv, buf.dvt.data(), ld, begin, len, a.hkv, g, a.d);
}

RLRUN_CPU_AVX2 void backward_task_avx2(const AttnDims& a, const BackwardArgs& x, int64_t begin, int64_t first,
                                       int64_t end, int64_t g, Buffers& buf) {
  backward_task_body(a, x, begin, first, end, g, buf);
}

void backward_task_base(const AttnDims& a, const BackwardArgs& x, int64_t begin, int64_t first, int64_t end,
                        int64_t g, Buffers& buf) {
  backward_task_body(a, x, begin, first, end, g, buf);
}

}  // namespace

void CpuBackend::attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen,
                                         int64_t window, const Tensor& q_begin) {
  AttnDims a = check_cu_seqlens("attention_backward", q, k, cu_seqlens, max_seqlen);
  a.window = window;
  const int32_t* cu = cu_seqlens.i32();
  const std::vector<int64_t> first = first_queries("attention_backward", cu, a.num_seqs, q_begin);
  struct Task { int64_t seq, kv_head, cost; };
  std::vector<Task> tasks;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t len = cu[s + 1] - cu[s], queries = cu[s + 1] - first[s];
    for (int64_t g = 0; g < a.hkv; ++g) tasks.push_back({s, g, queries * len});
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& x, const Task& y) { return x.cost > y.cost; });
  const BackwardArgs args{q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), dout.f32(), dq.f32(), dk.f32(), dv.f32()};
  const int64_t num_tasks = static_cast<int64_t>(tasks.size());
  const bool avx2 = avx2_;
#pragma omp parallel num_threads(threads_for(a.n * a.hq * max_seqlen))
  {
    Buffers buf(std::max<int64_t>(max_seqlen, 1), a.d, true);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < num_tasks; ++t) {
      const int64_t s = tasks[t].seq, begin = cu[s], end = cu[s + 1];
      if (avx2)
        backward_task_avx2(a, args, begin, first[s], end, tasks[t].kv_head, buf);
      else
        backward_task_base(a, args, begin, first[s], end, tasks[t].kv_head, buf);
    }
  }
}

}  // namespace rlrun::engine::cpu
