#include "rollout/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace rlrun::rollout {
namespace {

double log_softmax_at(const std::vector<float>& logits, int id, float t) {
  double max = -1e30, sum = 0;
  for (float x : logits) max = std::max(max, static_cast<double>(x / t));
  for (float x : logits) sum += std::exp(x / t - max);
  return logits[id] / t - max - std::log(sum);
}

TEST(Sampler, GreedyPicksArgmaxWithModelLogprob) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  SampleRng rng(1, 0);
  SamplerScratch scratch;
  SampledToken t = sample_token(logits, {0.0f, 1.0f}, rng, scratch);
  EXPECT_EQ(t.id, 1);
  EXPECT_NEAR(t.logprob, log_softmax_at(logits, 1, 1.0f), 1e-6);
}

TEST(Sampler, FrequenciesFollowTemperatureScaledSoftmax) {
  std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
  const float temp = 0.7f;
  SampleRng rng(42, 3);
  SamplerScratch scratch;
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    SampledToken t = sample_token(logits, {temp, 1.0f}, rng, scratch);
    ++counts[t.id];
    ASSERT_NEAR(t.logprob, log_softmax_at(logits, t.id, temp), 1e-5);  // the sampled distribution
  }
  for (int id = 0; id < 4; ++id) {
    double p = std::exp(log_softmax_at(logits, id, temp));
    double sd = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(counts[id] / static_cast<double>(n), p, 5 * sd) << "token " << id;
  }
}

TEST(Sampler, TopPKeepsTheNucleusAndRenormalises) {
  // probabilities ~ {0.5, 0.3, 0.15, 0.05}: top_p 0.75 keeps ids 0 and 1 only
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SampleRng rng(7, 0);
  SamplerScratch scratch;
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    SampledToken t = sample_token(logits, {1.0f, 0.75f}, rng, scratch);
    ++counts[t.id];
    const double renorm = t.id == 0 ? 0.5 / 0.8 : 0.3 / 0.8;
    ASSERT_NEAR(t.logprob, std::log(renorm), 1e-5);
  }
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_NEAR(counts[0] / static_cast<double>(n), 0.625, 0.02);
}

TEST(Sampler, LargeVocabularyNucleusBeyondFirstPrefix) {
  // a flat distribution over 1000 tokens: top_p 0.5 needs ~500 tokens (past the first 64 sorted)
  std::vector<float> logits(1000, 0.0f);
  SampleRng rng(9, 1);
  SamplerScratch scratch;
  for (int i = 0; i < 100; ++i) {
    SampledToken t = sample_token(logits, {1.0f, 0.5f}, rng, scratch);
    EXPECT_NEAR(t.logprob, std::log(1.0 / 500), 1e-4);
  }
}

TEST(Sampler, SameSeedAndIndexGiveSameStream) {
  std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f};
  SamplerScratch scratch;
  SampleRng a(5, 11), b(5, 11), c(5, 12);
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    int ta = sample_token(logits, {1.0f, 1.0f}, a, scratch).id;
    int tb = sample_token(logits, {1.0f, 1.0f}, b, scratch).id;
    int tc = sample_token(logits, {1.0f, 1.0f}, c, scratch).id;
    EXPECT_EQ(ta, tb);
    differ += ta != tc;
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace rlrun::rollout
