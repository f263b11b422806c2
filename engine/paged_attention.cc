#include "engine/paged_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"

namespace rlrun::engine {

void paged_attention_forward(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                             const PagedAttentionBatch& batch) {
  RLRUN_CHECK(q.backend() && q.backend()->is_host(),
              "paged_attention_forward is a host-side helper; backend " +
                  (q.backend() ? q.backend()->name() : std::string("?")) + " needs its own paged attention op");
  RLRUN_CHECK(q.rank() == 3 && out.shape() == q.shape() && k_cache.rank() == 3 && v_cache.shape() == k_cache.shape(),
              "paged_attention_forward: q " + q.str() + ", out " + out.str() + ", k " + k_cache.str());
  const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k_cache.dim(1), bs = batch.block_size;
  RLRUN_CHECK(k_cache.dim(2) == d && hkv > 0 && hq % hkv == 0, "paged_attention_forward: head shapes differ");
  const int64_t num_seqs = static_cast<int64_t>(batch.start.size());
  RLRUN_CHECK(static_cast<int64_t>(batch.cu_q.size()) == num_seqs + 1 &&
                  static_cast<int64_t>(batch.block_tables.size()) == num_seqs && batch.cu_q[num_seqs] == n,
              "paged_attention_forward: batch description does not match q");
  std::vector<int32_t> seq_of(n);
  int64_t max_ctx = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int32_t i = batch.cu_q[s]; i < batch.cu_q[s + 1]; ++i) seq_of[i] = static_cast<int32_t>(s);
    const int64_t ctx = batch.start[s] + batch.cu_q[s + 1] - batch.cu_q[s];
    RLRUN_CHECK(ctx <= static_cast<int64_t>(batch.block_tables[s].size()) * bs,
                "paged_attention_forward: sequence context exceeds its block table");
    max_ctx = std::max(max_ctx, ctx);
  }
  const float* qd = q.f32();
  const float* kd = k_cache.f32();
  const float* vd = v_cache.f32();
  float* od = out.f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = hq / hkv;
  // The CPU backend's thread count, so this region and its own never oversubscribe the cores.
  const auto* cpu = dynamic_cast<const cpu::CpuBackend*>(q.backend());
  const int threads = cpu != nullptr ? cpu->num_threads() : omp_get_max_threads();

#pragma omp parallel num_threads(threads)
  {
    std::vector<float> scores(static_cast<size_t>(max_ctx));
#pragma omp for schedule(dynamic, 4)
    for (int64_t item = 0; item < n * hq; ++item) {
      const int64_t i = item / hq, h = item % hq, g = h / group, s = seq_of[i];
      const int64_t pos = batch.start[s] + (i - batch.cu_q[s]);
      const std::span<const int32_t> table = batch.block_tables[s];
      const float* qi = qd + (i * hq + h) * d;
      float m = -INFINITY;
      for (int64_t j = 0; j <= pos; ++j) {
        const float* kj = kd + ((int64_t{table[j / bs]} * bs + j % bs) * hkv + g) * d;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t e = 0; e < d; ++e) dot += qi[e] * kj[e];
        scores[j] = scale * dot;
        m = std::max(m, scores[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j <= pos; ++j) {
        scores[j] = std::exp(scores[j] - m);
        sum += scores[j];
      }
      float* oi = od + (i * hq + h) * d;
      std::fill(oi, oi + d, 0.0f);
      for (int64_t j = 0; j <= pos; ++j) {
        const float p = scores[j] / sum;
        const float* vj = vd + ((int64_t{table[j / bs]} * bs + j % bs) * hkv + g) * d;
#pragma omp simd
        for (int64_t e = 0; e < d; ++e) oi[e] += p * vj[e];
      }
    }
  }
}

}  // namespace rlrun::engine
