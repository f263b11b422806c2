// cpu_logprob.cc - fused log-softmax + gather + entropy over the vocabulary, one row per thread.
//
// Forward reads each logits row twice (max, then the shifted sums) and stores only three floats
// per row: nothing of size V is materialised. With m = max z, e_v = exp(z_v - m), Z = sum e_v:
//   lse = m + log Z;  logprob = z_t - lse;  entropy = lse - E_p[z] = log Z - sum e_v (z_v - m) / Z.
// Backward recomputes p_v = exp(z_v - lse) element by element, so it can write dlogits over the
// logits in place:  dz_v = dlogprob (1[v = t] - p_v) - dentropy p_v (log p_v + entropy).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "engine/cpu/cpu_backend.h"

namespace rlrun::engine::cpu {

void CpuBackend::logprob_forward(const Tensor& logprob, const Tensor& entropy, const Tensor& lse, const Tensor& logits,
                                 const Tensor& targets) {
  expect_dtype("logprob_forward", "logits", logits, DType::kF32);
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  expect("logprob_forward", "targets", targets, Shape{n}, DType::kI32);
  expect("logprob_forward", "logprob", logprob, Shape{n});
  expect("logprob_forward", "entropy", entropy, Shape{n});
  expect("logprob_forward", "lse", lse, Shape{n});
  const float* z = logits.f32();
  const int32_t* tgt = targets.i32();
  float *lp = logprob.f32(), *ent = entropy.f32(), *ls = lse.f32();
#pragma omp parallel for num_threads(num_threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = z + i * vocab;
    RLRUN_CHECK(tgt[i] < vocab, "logprob_forward: target " + std::to_string(tgt[i]) + " >= vocab " +
                                    std::to_string(vocab));
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < vocab; ++c) m = std::max(m, row[c]);
    float sum = 0.0f, weighted = 0.0f;  // sum e_v, sum e_v (z_v - m)
    for (int64_t c = 0; c < vocab; ++c) {
      const float shifted = row[c] - m;
      const float e = std::exp(shifted);
      sum += e;
      weighted += e * shifted;
    }
    const float log_z = std::log(sum);
    ls[i] = m + log_z;
    ent[i] = log_z - weighted / sum;
    lp[i] = tgt[i] >= 0 ? row[tgt[i]] - ls[i] : 0.0f;
  }
}

void CpuBackend::logprob_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                  const Tensor& lse, const Tensor& entropy, const Tensor& dlogprob,
                                  const Tensor& dentropy) {
  expect_dtype("logprob_backward", "logits", logits, DType::kF32);
  const int64_t n = logits.shape().rows(), vocab = logits.shape().cols();
  expect("logprob_backward", "dlogits", dlogits, logits.shape());
  expect("logprob_backward", "targets", targets, Shape{n}, DType::kI32);
  expect("logprob_backward", "lse", lse, Shape{n});
  expect("logprob_backward", "entropy", entropy, Shape{n});
  expect("logprob_backward", "dlogprob", dlogprob, Shape{n});
  if (dentropy.defined()) expect("logprob_backward", "dentropy", dentropy, Shape{n});
  const float* z = logits.f32();
  float* dz = dlogits.f32();
  const int32_t* tgt = targets.i32();
  const float *ls = lse.f32(), *ent = entropy.f32(), *dlp = dlogprob.f32();
  const float* dent = dentropy.defined() ? dentropy.f32() : nullptr;
#pragma omp parallel for num_threads(num_threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = z + i * vocab;
    float* drow = dz + i * vocab;
    const bool has_target = tgt[i] >= 0;
    const float g_lp = has_target ? dlp[i] : 0.0f, g_ent = dent ? dent[i] : 0.0f, l = ls[i], h = ent[i];
    for (int64_t c = 0; c < vocab; ++c) {
      const float logp = row[c] - l;
      const float p = std::exp(logp);
      drow[c] = -g_lp * p - g_ent * p * (logp + h);
    }
    if (has_target) drow[tgt[i]] += g_lp;
  }
}

}  // namespace rlrun::engine::cpu
