// cpu_logprob.cc - fused log-softmax + gather + entropy over the vocabulary, one row per thread.
//
// Forward reads each logits row twice (max, then the shifted sums) and stores only three floats
// per row: nothing of size V is materialised. With m = max z, e_v = exp(z_v - m), Z = sum e_v:
//   lse = m + log Z;  logprob = z_t - lse;  entropy = lse - E_p[z] = log Z - sum e_v (z_v - m) / Z.
// Backward recomputes p_v = exp(z_v - lse) element by element, so it can write dlogits over the
// logits in place:  dz_v = dlogprob (1[v = t] - p_v) - dentropy p_v (log p_v + entropy).
#include <omp.h>

#include <cmath>

#include "common/check.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_math.h"

namespace rlrun::engine::cpu {

namespace {

struct RowStats {
  float lse, entropy;
};

RLRUN_CPU_INLINE RowStats row_stats_body(const float* row, int64_t vocab) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < vocab; ++c) m = row[c] > m ? row[c] : m;
  float sum = 0.0f, weighted = 0.0f;  // sum e_v, sum e_v (z_v - m)
#pragma omp simd reduction(+ : sum, weighted)
  for (int64_t c = 0; c < vocab; ++c) {
    const float shifted = row[c] - m;
    const float e = fast_exp(shifted);
    sum += e;
    weighted += e * shifted;
  }
  const float log_z = std::log(sum);
  return {m + log_z, log_z - weighted / sum};
}

RLRUN_CPU_AVX2 RowStats row_stats_avx2(const float* row, int64_t vocab) { return row_stats_body(row, vocab); }
RowStats row_stats_base(const float* row, int64_t vocab) { return row_stats_body(row, vocab); }

// drow = -g_lp p - g_ent p (log p + h), p = exp(row - lse); drow may be row.
RLRUN_CPU_INLINE void row_grad_body(float* drow, const float* row, int64_t vocab, float lse, float h, float g_lp,
                                    float g_ent) {
#pragma omp simd
  for (int64_t c = 0; c < vocab; ++c) {
    const float logp = row[c] - lse;
    const float p = fast_exp(logp);
    drow[c] = -g_lp * p - g_ent * p * (logp + h);
  }
}

RLRUN_CPU_AVX2 void row_grad_avx2(float* drow, const float* row, int64_t vocab, float lse, float h, float g_lp,
                                  float g_ent) {
  row_grad_body(drow, row, vocab, lse, h, g_lp, g_ent);
}
void row_grad_base(float* drow, const float* row, int64_t vocab, float lse, float h, float g_lp, float g_ent) {
  row_grad_body(drow, row, vocab, lse, h, g_lp, g_ent);
}

}  // namespace

void CpuBackend::logprob_forward_impl(const Tensor& logprob, const Tensor& entropy, const Tensor& lse,
                                      const Tensor& logits, const Tensor& targets) {
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  const float* z = logits.f32();
  const int32_t* tgt = targets.i32();
  float *lp = logprob.f32(), *ent = entropy.f32(), *ls = lse.f32();
  const bool avx2 = avx2_;
#pragma omp parallel for num_threads(threads_for(n * vocab)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = z + i * vocab;
    RLRUN_CHECK(tgt[i] < vocab, "logprob_forward: target " + std::to_string(tgt[i]) + " >= vocab " +
                                    std::to_string(vocab));
    const RowStats st = avx2 ? row_stats_avx2(row, vocab) : row_stats_base(row, vocab);
    ls[i] = st.lse;
    ent[i] = st.entropy;
    lp[i] = tgt[i] >= 0 ? row[tgt[i]] - st.lse : 0.0f;
  }
}

void CpuBackend::logprob_backward_impl(const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                       const Tensor& lse, const Tensor& entropy, const Tensor& dlogprob,
                                       const Tensor& dentropy) {
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  const float* z = logits.f32();
  float* dz = dlogits.f32();
  const int32_t* tgt = targets.i32();
  const float *ls = lse.f32(), *ent = entropy.f32(), *dlp = dlogprob.f32();
  const float* dent = dentropy.defined() ? dentropy.f32() : nullptr;
  const bool avx2 = avx2_;
#pragma omp parallel for num_threads(threads_for(n * vocab)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const bool has_target = tgt[i] >= 0;
    const float g_lp = has_target ? dlp[i] : 0.0f, g_ent = dent ? dent[i] : 0.0f;
    if (avx2)
      row_grad_avx2(dz + i * vocab, z + i * vocab, vocab, ls[i], ent[i], g_lp, g_ent);
    else
      row_grad_base(dz + i * vocab, z + i * vocab, vocab, ls[i], ent[i], g_lp, g_ent);
    if (has_target) dz[i * vocab + tgt[i]] += g_lp;
  }
}

}  // namespace rlrun::engine::cpu
