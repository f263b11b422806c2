#include "rollout/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "engine/cpu/cpu_math.h"

namespace rlrun::rollout {

SampleRng::SampleRng(uint64_t seed, uint64_t sample_index) : stream_{splitmix64(seed ^ splitmix64(sample_index))} {}

namespace {

using engine::cpu::fast_exp;

// The one pass over the vocabulary every draw needs: scaled = logits / T, weights = exp(scaled -
// max), returning their sum. Vectorised (fast_exp, ~1e-7 relative error); partial sums are added
// up in double so a 49k-token vocabulary loses nothing to rounding.
struct Weighed {
  float max;
  double total;
};

RLRUN_CPU_INLINE Weighed weigh_body(const float* logits, int64_t v, float inv_t, float* scaled, float* weights) {
  float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
  for (int64_t i = 0; i < v; ++i) {
    scaled[i] = logits[i] * inv_t;
    max = scaled[i] > max ? scaled[i] : max;
  }
#pragma omp simd
  for (int64_t i = 0; i < v; ++i) weights[i] = fast_exp(scaled[i] - max);
  double total = 0.0;  // float partial sums of 1024 weights (<= 1 each), added up in double
  for (int64_t at = 0; at < v; at += 1024) {
    const int64_t end = at + 1024 < v ? at + 1024 : v;
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (int64_t i = at; i < end; ++i) part += weights[i];
    total += part;
  }
  return {max, total};
}

RLRUN_CPU_AVX2 Weighed weigh_avx2(const float* logits, int64_t v, float inv_t, float* scaled, float* weights) {
  return weigh_body(logits, v, inv_t, scaled, weights);
}
Weighed weigh_base(const float* logits, int64_t v, float inv_t, float* scaled, float* weights) {
  return weigh_body(logits, v, inv_t, scaled, weights);
}

Weighed weigh(std::span<const float> logits, float inv_t, SamplerScratch& scratch) {
  scratch.scaled.resize(logits.size());
  scratch.weights.resize(logits.size());
  const auto v = static_cast<int64_t>(logits.size());
  return engine::cpu::cpu_has_avx2_fma()
             ? weigh_avx2(logits.data(), v, inv_t, scratch.scaled.data(), scratch.weights.data())
             : weigh_base(logits.data(), v, inv_t, scratch.scaled.data(), scratch.weights.data());
}

// The token (among `ids`, in order) where the running sum of weights first passes target; the last
// when rounding leaves it short.
template <typename Ids>
int32_t pick(const Ids& ids, size_t n, const std::vector<float>& weights, double target) {
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += weights[static_cast<size_t>(ids(i))];
    if (acc > target) return ids(i);
  }
  return ids(n - 1);
}

// Indices of the smallest set of most likely tokens whose probability mass reaches top_p, most
// likely first. Sorts growing prefixes (64, 256, ...) so a peaked distribution costs O(V).
void nucleus(const std::vector<float>& scaled, const std::vector<float>& weights, double total, float top_p,
             std::vector<int32_t>& idx, size_t* size) {
  const size_t v = scaled.size();
  idx.resize(v);
  for (size_t i = 0; i < v; ++i) idx[i] = static_cast<int32_t>(i);
  auto by_logit = [&](int32_t a, int32_t b) { return scaled[a] > scaled[b] || (scaled[a] == scaled[b] && a < b); };
  size_t k = std::min<size_t>(64, v);
  while (true) {
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), by_logit);
    double mass = 0.0;
    for (size_t i = 0; i < k; ++i) {
      mass += weights[idx[i]] / total;
      if (mass >= top_p) {
        *size = i + 1;
        return;
      }
    }
    if (k == v) {
      *size = v;  // rounding: the whole vocabulary
      return;
    }
    k = std::min(v, k * 4);
  }
}

}  // namespace

SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, SampleRng& rng,
                          SamplerScratch& scratch) {
  RLRUN_CHECK(!logits.empty());
  const bool greedy = params.temperature <= 0.0f;
  // Greedy reports the model's own log-probability: softmax at temperature 1.
  const Weighed w = weigh(logits, greedy ? 1.0f : 1.0f / params.temperature, scratch);
  const std::vector<float>& scaled = scratch.scaled;
  auto logprob = [&](int32_t id, double mass) {
    return SampledToken{id, static_cast<float>(scaled[id] - w.max - std::log(mass))};
  };
  if (greedy) return logprob(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()), w.total);

  if (params.top_p >= 1.0f) {
    const int32_t id = pick([](size_t i) { return static_cast<int32_t>(i); }, logits.size(), scratch.weights,
                            rng.uniform() * w.total);
    return logprob(id, w.total);
  }
  size_t n = 0;
  std::vector<int32_t>& order = scratch.order;
  nucleus(scaled, scratch.weights, w.total, params.top_p, order, &n);
  double kept = 0.0;
  for (size_t i = 0; i < n; ++i) kept += scratch.weights[order[i]];
  const int32_t id = pick([&](size_t i) { return order[i]; }, n, scratch.weights, rng.uniform() * kept);
  return logprob(id, kept);
}

}  // namespace rlrun::rollout
