// StepCostSums: the least-squares fit of an engine step's cost recovers known coefficients, keeps
// them non-negative, adds across workers, and rejects malformed wire sums.
#include "rollout/step_cost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace rlrun::rollout {
namespace {

constexpr StepCost kTruth{0.002, 0.0005, 0.00001, 0.000002};

StepCostSums sums_of(int first, int last, const StepCost& truth, double wall_factor) {
  StepCostSums s;
  for (int i = first; i < last; ++i) {
    const StepShape shape{i % 17 + 1, (i * 7) % 50, (i * 13) % 400};  // shapes that vary independently
    s.add(shape, truth.seconds(shape), wall_factor * truth.seconds(shape));
  }
  return s;
}

TEST(StepCost, FitRecoversTheCoefficientsOfCpuAndWallTime) {
  const StepCostSums s = sums_of(0, 300, kTruth, 1.5);
  EXPECT_EQ(s.steps(), 300);
  const StepCost cpu = s.fit(true), wall = s.fit(false);
  EXPECT_NEAR(cpu.fixed, kTruth.fixed, 1e-9);
  EXPECT_NEAR(cpu.per_sequence, kTruth.per_sequence, 1e-9);
  EXPECT_NEAR(cpu.per_prefill_token, kTruth.per_prefill_token, 1e-10);
  EXPECT_NEAR(cpu.per_context_token, kTruth.per_context_token, 1e-10);
  EXPECT_NEAR(wall.per_sequence, 1.5 * kTruth.per_sequence, 1e-9);
}

TEST(StepCost, SumsOfSeveralWorkersAddUpToOneFit) {
  StepCostSums a = sums_of(0, 150, kTruth, 1), b = sums_of(150, 300, kTruth, 1);
  a += b;
  const std::vector<double> all = sums_of(0, 300, kTruth, 1).flat(), added = a.flat();
  ASSERT_EQ(all.size(), added.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_NEAR(all[i], added[i], 1e-9 * std::max(1.0, std::abs(all[i])));
}

TEST(StepCost, ANegativeCoefficientIsDroppedAndTheRestRefitted) {
  // The cost falls with context (nonsense a noisy fit could produce): the fit keeps it at zero
  // rather than predict a negative cost for long contexts.
  const StepCost falling{0.01, 0.001, 0.0, -0.00001};
  StepCostSums s;
  for (int i = 0; i < 200; ++i) {
    const StepShape shape{i % 9 + 1, 0, (i * 31) % 300};
    s.add(shape, std::max(0.0, falling.seconds(shape)), 0);
  }
  const StepCost fit = s.fit(true);
  EXPECT_EQ(fit.per_context_token, 0.0);
  EXPECT_GE(fit.fixed, 0.0);
  EXPECT_GT(fit.per_sequence, 0.0);
}

TEST(StepCost, FeaturesThatNeverVariedFitToZeroAndNoStepsFitToNothing) {
  StepCostSums s;
  for (int i = 0; i < 50; ++i) s.add({8, 0, 0}, 0.004, 0.004);  // always 8 sequences, nothing else
  const StepCost fit = s.fit(true);
  EXPECT_NEAR(fit.seconds({8, 0, 0}), 0.004, 1e-9);
  EXPECT_EQ(fit.per_prefill_token, 0.0);
  EXPECT_EQ(StepCostSums().fit(true).seconds({10, 10, 10}), 0.0);
}

TEST(StepCost, WireSumsRoundTripAndMalformedOnesAreRejected) {
  const StepCostSums s = sums_of(0, 40, kTruth, 1);
  Result<StepCostSums> back = StepCostSums::from_flat(s.flat());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->flat(), s.flat());
  std::vector<double> short_one = s.flat();
  short_one.pop_back();
  EXPECT_FALSE(StepCostSums::from_flat(short_one).ok());
  std::vector<double> nan = s.flat();
  nan[3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(StepCostSums::from_flat(nan).ok());
  std::vector<double> negative = s.flat();
  negative[0] = -1;
  EXPECT_FALSE(StepCostSums::from_flat(negative).ok());
}

}  // namespace
}  // namespace rlrun::rollout
