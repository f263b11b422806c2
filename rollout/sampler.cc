#include "rollout/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"

namespace rlrun::rollout {

SampleRng::SampleRng(uint64_t seed, uint64_t sample_index) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(sample_index), static_cast<uint32_t>(sample_index >> 32)};
  engine_.seed(seq);
}

double SampleRng::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }

namespace {

SampledToken greedy(std::span<const float> logits) {
  const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  double sum = 0.0;
  const float max = logits[best];
  for (float x : logits) sum += std::exp(static_cast<double>(x - max));
  return {best, static_cast<float>(-std::log(sum))};
}

// Indices of the smallest set of most likely tokens whose probability mass reaches top_p, most
// likely first. Sorts growing prefixes (64, 256, ...) so a peaked distribution costs O(V).
void nucleus(std::span<const float> scaled, double max, double total, float top_p, std::vector<int32_t>& idx,
             size_t* size) {
  const size_t v = scaled.size();
  idx.resize(v);
  for (size_t i = 0; i < v; ++i) idx[i] = static_cast<int32_t>(i);
  auto by_logit = [&](int32_t a, int32_t b) { return scaled[a] > scaled[b] || (scaled[a] == scaled[b] && a < b); };
  size_t k = std::min<size_t>(64, v);
  while (true) {
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), by_logit);
    double mass = 0.0;
    for (size_t i = 0; i < k; ++i) {
      mass += std::exp(scaled[idx[i]] - max) / total;
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
  if (params.temperature <= 0.0f) return greedy(logits);
  std::vector<float>& scaled = scratch.scaled;
  scaled.resize(logits.size());
  const float inv_t = 1.0f / params.temperature;
  float max = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    scaled[i] = logits[i] * inv_t;
    max = std::max(max, scaled[i]);
  }
  double total = 0.0;
  for (float x : scaled) total += std::exp(static_cast<double>(x - max));

  if (params.top_p >= 1.0f) {
    double target = rng.uniform() * total, acc = 0.0;
    size_t pick = logits.size() - 1;
    for (size_t i = 0; i < logits.size(); ++i) {
      acc += std::exp(static_cast<double>(scaled[i] - max));
      if (acc > target) {
        pick = i;
        break;
      }
    }
    return {static_cast<int32_t>(pick), static_cast<float>(scaled[pick] - max - std::log(total))};
  }

  size_t n = 0;
  std::vector<int32_t>& order = scratch.order;
  nucleus(scaled, max, total, params.top_p, order, &n);
  double kept = 0.0;
  for (size_t i = 0; i < n; ++i) kept += std::exp(static_cast<double>(scaled[order[i]] - max));
  double target = rng.uniform() * kept, acc = 0.0;
  int32_t pick = order[n - 1];
  for (size_t i = 0; i < n; ++i) {
    acc += std::exp(static_cast<double>(scaled[order[i]] - max));
    if (acc > target) {
      pick = order[i];
      break;
    }
  }
  return {pick, static_cast<float>(scaled[pick] - max - std::log(kept))};
}

}  // namespace rlrun::rollout
