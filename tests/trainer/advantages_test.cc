// Advantages by hand for each algorithm, error cases, and the zero-spread test.
#include "trainer/advantages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace rlrun::trainer {
namespace {

std::vector<float> advantages_of(Algorithm algorithm, const std::vector<float>& rewards) {
  std::vector<float> out(rewards.size(), -99.0f);
  Status s = compute_group_advantages(algorithm, rewards, out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

TEST(Advantages, GrpoDividesBySampleStd) {
  // r = {1, 0, 0, 1}: mean 0.5, deviations +-0.5, sum of squares 1.
  // Sample std = sqrt(1 / 3) = 0.5773503 (the population std would be 0.5, giving +-1).
  // A = +-0.5 / (0.5773503 + 1e-6) = +-0.8660239.
  const auto a = advantages_of(Algorithm::kGrpo, {1, 0, 0, 1});
  EXPECT_NEAR(a[0], 0.8660239, 1e-6);
  EXPECT_NEAR(a[1], -0.8660239, 1e-6);
  EXPECT_NEAR(a[2], -0.8660239, 1e-6);
  EXPECT_NEAR(a[3], 0.8660239, 1e-6);
}

TEST(Advantages, GrpoUnevenGroup) {
  // r = {3, 1, 2}: mean 2, deviations {1, -1, 0}, sum of squares 2, sample var 2 / 2 = 1, std 1.
  // A = {1, -1, 0} / (1 + 1e-6) = {0.999999, -0.999999, 0}.
  const auto a = advantages_of(Algorithm::kGrpo, {3, 1, 2});
  EXPECT_NEAR(a[0], 0.999999, 1e-7);
  EXPECT_NEAR(a[1], -0.999999, 1e-7);
  EXPECT_EQ(a[2], 0.0f);
}

TEST(Advantages, GspoUsesTheGrpoAdvantage) {
  const std::vector<float> r = {0.25f, 1.0f, 0.0f, 0.5f, 0.75f};
  EXPECT_EQ(advantages_of(Algorithm::kGspo, r), advantages_of(Algorithm::kGrpo, r));
}

TEST(Advantages, DrGrpoOnlySubtractsTheMean) {
  // r = {3, 1, 2}: mean 2 -> {1, -1, 0}.  r = {1, 0, 0, 0}: mean 0.25 -> {0.75, -0.25 x3}.
  EXPECT_THAT(advantages_of(Algorithm::kDrGrpo, {3, 1, 2}), testing::ElementsAre(1.0f, -1.0f, 0.0f));
  EXPECT_THAT(advantages_of(Algorithm::kDrGrpo, {1, 0, 0, 0}),
              testing::ElementsAre(0.75f, -0.25f, -0.25f, -0.25f));
}

TEST(Advantages, RlooLeavesOneOut) {
  // r = {3, 1, 2}: A0 = 3 - (1 + 2)/2 = 1.5, A1 = 1 - (3 + 2)/2 = -1.5, A2 = 2 - (3 + 1)/2 = 0.
  EXPECT_THAT(advantages_of(Algorithm::kRloo, {3, 1, 2}), testing::ElementsAre(1.5f, -1.5f, 0.0f));
  // r = {1, 0, 0, 0}: A0 = 1 - 0 = 1, A1..3 = 0 - 1/3 = -0.3333333 (= 4/3 * (r - 0.25)).
  const auto a = advantages_of(Algorithm::kRloo, {1, 0, 0, 0});
  EXPECT_FLOAT_EQ(a[0], 1.0f);
  for (int i = 1; i < 4; ++i) EXPECT_FLOAT_EQ(a[i], -1.0f / 3.0f);
}

TEST(Advantages, SingleSampleGroups) {
  EXPECT_THAT(advantages_of(Algorithm::kGrpo, {0.7f}), testing::ElementsAre(0.0f));
  EXPECT_THAT(advantages_of(Algorithm::kDrGrpo, {0.7f}), testing::ElementsAre(0.0f));
  std::vector<float> out(1);
  const std::vector<float> one = {0.7f};
  Status s = compute_group_advantages(Algorithm::kRloo, one, out);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), testing::HasSubstr("rloo needs group_size >= 2"));
}

TEST(Advantages, RejectsBadInput) {
  std::vector<float> out(2);
  const std::vector<float> nan_rewards = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  Status s = compute_group_advantages(Algorithm::kGrpo, nan_rewards, out);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), testing::HasSubstr("reward 1"));
  const std::vector<float> three = {1, 2, 3};
  EXPECT_FALSE(compute_group_advantages(Algorithm::kGrpo, three, out).ok());  // size mismatch
  EXPECT_FALSE(compute_group_advantages(Algorithm::kGrpo, {}, std::span<float>()).ok());
}

TEST(Advantages, ManyGroupsAreIndependent) {
  // Two groups of 3: {3, 1, 2} and {5, 5, 8}; dr_grpo: means 2 and 6.
  const std::vector<float> r = {3, 1, 2, 5, 5, 8};
  std::vector<float> a(6);
  ASSERT_TRUE(compute_advantages(Algorithm::kDrGrpo, r, 3, a).ok());
  EXPECT_THAT(a, testing::ElementsAre(1.0f, -1.0f, 0.0f, -1.0f, -1.0f, 2.0f));
  Status s = compute_advantages(Algorithm::kDrGrpo, r, 4, a);  // 6 is not a multiple of 4
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(compute_advantages(Algorithm::kDrGrpo, r, 0, a).ok());
  const std::vector<float> bad = {1, 2, std::numeric_limits<float>::infinity(), 0};
  std::vector<float> b(4);
  s = compute_advantages(Algorithm::kGrpo, bad, 2, b);
  EXPECT_THAT(s.message(), testing::HasSubstr("group 1"));
}

TEST(Advantages, ZeroSpread) {
  const std::vector<float> same = {0.5f, 0.5f, 0.5f};
  const std::vector<float> differ = {1.0f, 1.0f, std::nextafter(1.0f, 2.0f)};
  const std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
  EXPECT_TRUE(group_has_zero_spread(same));
  EXPECT_FALSE(group_has_zero_spread(differ));
  EXPECT_TRUE(group_has_zero_spread(differ, 1e-6));
  EXPECT_FALSE(group_has_zero_spread(std::vector<float>{0.0f, 1.0f}));
  EXPECT_TRUE(group_has_zero_spread({}));
  EXPECT_FALSE(group_has_zero_spread(nan));
  // Zero spread means every advantage is zero, for each algorithm.
  for (Algorithm alg : {Algorithm::kGrpo, Algorithm::kDrGrpo, Algorithm::kRloo, Algorithm::kGspo}) {
    EXPECT_THAT(advantages_of(alg, same), testing::Each(0.0f)) << algorithm_name(alg);
  }
}

TEST(Advantages, AlgorithmNames) {
  for (Algorithm alg : {Algorithm::kGrpo, Algorithm::kDrGrpo, Algorithm::kRloo, Algorithm::kGspo}) {
    auto parsed = parse_algorithm(algorithm_name(alg));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, alg);
  }
  auto bad = parse_algorithm("ppo");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), testing::HasSubstr("grpo, dr_grpo, rloo, gspo"));
}

}  // namespace
}  // namespace rlrun::trainer
