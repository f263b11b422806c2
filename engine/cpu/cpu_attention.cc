// cpu_attention.cc - causal grouped-query attention over packed sequences, one query row at a time.
//
// Forward: for each (sequence, query head, block of query rows), each row computes its scores
// against the keys of its own sequence up to itself into a per-thread row buffer (at most
// max_seqlen floats), takes the softmax and the weighted sum of values. Nothing larger than one
// score row per thread exists, and no score ever crosses a sequence boundary.
// Backward: one task per (sequence, kv head) owns dk and dv of that head's rows of the sequence,
// so accumulation needs no atomics and is deterministic; it recomputes each probability row from
// the saved logsumexp (p = exp(s - lse)) like flash-attention does.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "engine/cpu/cpu_backend.h"

namespace rlrun::engine::cpu {

namespace {

constexpr int64_t kQueryBlock = 16;  // query rows per forward task

struct AttnDims {
  int64_t n, hq, hkv, d, group, num_seqs;
};

inline float dot(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy_row(float* y, float alpha, const float* x, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] += alpha * x[i];
}

AttnDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens,
                         int64_t max_seqlen) {
  expect_dtype(op, "q", q, DType::kF32);
  expect_dtype(op, "k", k, DType::kF32);
  RLRUN_CHECK(q.rank() == 3 && k.rank() == 3, std::string(op) + ": q " + q.str() + " and k " + k.str() +
                                                  " must be (N, H, D)");
  AttnDims a{q.dim(0), q.dim(1), k.dim(1), q.dim(2), 0, 0};
  RLRUN_CHECK(a.hkv > 0 && a.hq % a.hkv == 0, std::string(op) + ": query heads " + std::to_string(a.hq) +
                                                  " not a multiple of kv heads " + std::to_string(a.hkv));
  a.group = a.hq / a.hkv;
  expect(op, "k", k, Shape{a.n, a.hkv, a.d});
  expect(op, "v", v, Shape{a.n, a.hkv, a.d});
  expect_dtype(op, "cu_seqlens", cu_seqlens, DType::kI32);
  RLRUN_CHECK(cu_seqlens.rank() == 1 && cu_seqlens.dim(0) >= 1, std::string(op) + ": cu_seqlens is " + cu_seqlens.str());
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

// One query row: out_row (D) and its logsumexp, over keys [begin, end) of kv head `g`.
float attend_row(const AttnDims& a, const float* qi, const float* k, const float* v, int64_t g, int64_t begin,
                 int64_t end, float scale, float* scores, float* out_row) {
  float m = -INFINITY;
  for (int64_t j = begin; j < end; ++j) {
    const float s = scale * dot(qi, k + (j * a.hkv + g) * a.d, a.d);
    scores[j - begin] = s;
    m = std::max(m, s);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < end - begin; ++j) {
    const float p = std::exp(scores[j] - m);
    scores[j] = p;
    sum += p;
  }
  std::fill(out_row, out_row + a.d, 0.0f);
  for (int64_t j = begin; j < end; ++j) axpy_row(out_row, scores[j - begin], v + (j * a.hkv + g) * a.d, a.d);
  const float inv = 1.0f / sum;
  for (int64_t c = 0; c < a.d; ++c) out_row[c] *= inv;
  return m + std::log(sum);
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& cu_seqlens, int64_t max_seqlen) {
  const AttnDims a = check_attention("attention_forward", q, k, v, cu_seqlens, max_seqlen);
  expect("attention_forward", "out", out, q.shape());
  if (lse.defined()) expect("attention_forward", "lse", lse, Shape{a.n, a.hq});
  const int32_t* cu = cu_seqlens.i32();
  // Tasks: (sequence, query block, head), longest-running (latest rows) first.
  struct Task { int64_t seq, row0, head; };
  std::vector<Task> tasks;
  for (int64_t s = 0; s < a.num_seqs; ++s)
    for (int64_t r = cu[s]; r < cu[s + 1]; r += kQueryBlock)
      for (int64_t h = 0; h < a.hq; ++h) tasks.push_back({s, r, h});
  std::sort(tasks.begin(), tasks.end(), [&](const Task& x, const Task& y) { return x.row0 - cu[x.seq] > y.row0 - cu[y.seq]; });

  const float scale = 1.0f / std::sqrt(static_cast<float>(a.d));
  const float *qq = q.f32(), *kk = k.f32(), *vv = v.f32();
  float* o = out.f32();
  float* ls = lse.defined() ? lse.f32() : nullptr;
  const int64_t num_tasks = static_cast<int64_t>(tasks.size());
#pragma omp parallel num_threads(num_threads_)
  {
    std::vector<float> scores(static_cast<size_t>(std::max<int64_t>(max_seqlen, 1)));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < num_tasks; ++t) {
      const Task& task = tasks[t];
      const int64_t begin = cu[task.seq], row_end = std::min<int64_t>(task.row0 + kQueryBlock, cu[task.seq + 1]);
      const int64_t g = task.head / a.group;
      for (int64_t i = task.row0; i < row_end; ++i) {
        const int64_t row = i * a.hq + task.head;
        const float l = attend_row(a, qq + row * a.d, kk, vv, g, begin, i + 1, scale, scores.data(), o + row * a.d);
        if (ls) ls[row] = l;
      }
    }
  }
}

namespace {

// Backward of one (sequence [begin, end), kv head g): writes dq for the group's query heads and
// dk, dv for head g over the sequence's rows.
void attention_backward_task(const AttnDims& a, int64_t begin, int64_t end, int64_t g, float scale, const float* q,
                             const float* k, const float* v, const float* out, const float* lse, const float* dout,
                             float* dq, float* dk, float* dv, float* dp_row) {
  for (int64_t j = begin; j < end; ++j) {
    std::fill(dk + (j * a.hkv + g) * a.d, dk + (j * a.hkv + g + 1) * a.d, 0.0f);
    std::fill(dv + (j * a.hkv + g) * a.d, dv + (j * a.hkv + g + 1) * a.d, 0.0f);
  }
  for (int64_t h = g * a.group; h < (g + 1) * a.group; ++h) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = i * a.hq + h;
      const float *qi = q + row * a.d, *doi = dout + row * a.d;
      const float di = dot(doi, out + row * a.d, a.d);  // sum_j p_j dp_j
      const float l = lse[row];
      float* dqi = dq + row * a.d;
      std::fill(dqi, dqi + a.d, 0.0f);
      for (int64_t j = begin; j <= i; ++j) {
        const int64_t kv = (j * a.hkv + g) * a.d;
        const float p = std::exp(scale * dot(qi, k + kv, a.d) - l);
        const float ds = p * (dot(doi, v + kv, a.d) - di) * scale;
        dp_row[j - begin] = ds;
        axpy_row(dv + kv, p, doi, a.d);
      }
      for (int64_t j = begin; j <= i; ++j) {
        const int64_t kv = (j * a.hkv + g) * a.d;
        axpy_row(dqi, dp_row[j - begin], k + kv, a.d);
        axpy_row(dk + kv, dp_row[j - begin], qi, a.d);
      }
    }
  }
}

}  // namespace

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, const Tensor& cu_seqlens, int64_t max_seqlen) {
  const AttnDims a = check_attention("attention_backward", q, k, v, cu_seqlens, max_seqlen);
  expect("attention_backward", "out", out, q.shape());
  expect("attention_backward", "dout", dout, q.shape());
  expect("attention_backward", "dq", dq, q.shape());
  expect("attention_backward", "dk", dk, k.shape());
  expect("attention_backward", "dv", dv, v.shape());
  expect("attention_backward", "lse", lse, Shape{a.n, a.hq});
  const int32_t* cu = cu_seqlens.i32();
  struct Task { int64_t seq, kv_head, cost; };
  std::vector<Task> tasks;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t len = cu[s + 1] - cu[s];
    for (int64_t g = 0; g < a.hkv; ++g) tasks.push_back({s, g, len * len});
  }
  std::sort(tasks.begin(), tasks.end(), [](const Task& x, const Task& y) { return x.cost > y.cost; });
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.d));
  const int64_t num_tasks = static_cast<int64_t>(tasks.size());
#pragma omp parallel num_threads(num_threads_)
  {
    std::vector<float> dp_row(static_cast<size_t>(std::max<int64_t>(max_seqlen, 1)));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < num_tasks; ++t) {
      const Task& task = tasks[t];
      attention_backward_task(a, cu[task.seq], cu[task.seq + 1], task.kv_head, scale, q.f32(), k.f32(), v.f32(),
                              out.f32(), lse.f32(), dout.f32(), dq.f32(), dk.f32(), dv.f32(), dp_row.data());
    }
  }
}

}  // namespace rlrun::engine::cpu
