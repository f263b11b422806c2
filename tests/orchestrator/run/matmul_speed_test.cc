// MatmulSpeedWatch (run/matmul_speed.h): the trainer's products judged against the host's measured
// sgemm speed times the threads, only once they are large and a few steps in, with the first cause
// that applies named: a fallback kernel, an oversubscribed node, threads that did not get their cores.
#include "orchestrator/run/matmul_speed.h"

#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using Placement = MatmulSpeedWatch::Placement;

// A step on 2 threads of a host whose one thread measured 100 GFLOP/s, busy its whole wall time.
std::map<std::string, double> step(double gflops, double mean_mflops = 200, double widest = 1, double cpu_seconds = 2) {
  return {{"matmul_gflops", gflops},       {"matmul_mean_mflops", mean_mflops}, {"host_sgemm_gflops", 100},
          {"host_widest_kernels", widest}, {"cpu_threads", 2},                  {"cpu_seconds", cpu_seconds},
          {"seconds_forward_backward", 0.8}, {"seconds_optimizer", 0.2}};
}

MatmulSpeedWatch watch_of(int steps, const std::map<std::string, double>& metrics) {
  MatmulSpeedWatch watch;
  for (int i = 0; i < steps; ++i) watch.on_step(metrics);
  return watch;
}

const Placement kFits{4, 4};

TEST(MatmulSpeedWatch, ProductsAtTheHostsSpeedAreNotSlow) {
  const MatmulSpeedWatch watch = watch_of(5, step(170));
  const auto v = watch.verdict(kFits);
  ASSERT_TRUE(v.has_value());
  EXPECT_DOUBLE_EQ(v->expected_gflops, 200);
  EXPECT_DOUBLE_EQ(v->gflops, 170);
  EXPECT_TRUE(v->cause.empty());
  EXPECT_EQ(watch.advice(kFits), "");
  EXPECT_EQ(watch.to_json(kFits)["slow"], false);
}

TEST(MatmulSpeedWatch, NothingIsJudgedBeforeAFewStepsOrOnSmallProducts) {
  EXPECT_FALSE(watch_of(MatmulSpeedWatch::kMinSteps - 1, step(10)).verdict(kFits).has_value());
  EXPECT_FALSE(watch_of(5, step(10, /*mean_mflops=*/2)).verdict(kFits).has_value());
  EXPECT_TRUE(watch_of(5, step(10, 2)).to_json(kFits).is_null());
  // A CUDA trainer reports no matmul figures: skipped.
  MatmulSpeedWatch cuda;
  for (int i = 0; i < 5; ++i) cuda.on_step({{"cpu_threads", 1}});
  EXPECT_FALSE(cuda.verdict(kFits).has_value());
}

TEST(MatmulSpeedWatch, AFallbackKernelIsNamedFirst) {
  const MatmulSpeedWatch watch = watch_of(5, step(60, 200, /*widest=*/0));
  const std::string advice = watch.advice(Placement{8, 2});  // oversubscribed too: the kernel comes first
  EXPECT_NE(advice.find("60 GFLOP/s, 30% of what 2 threads"), std::string::npos) << advice;
  EXPECT_NE(advice.find("fallback kernel"), std::string::npos) << advice;
}

TEST(MatmulSpeedWatch, AnOversubscribedNodeIsNamed) {
  const std::string advice = watch_of(5, step(60)).advice(Placement{8, 2});
  EXPECT_NE(advice.find("oversubscribed"), std::string::npos) << advice;
  EXPECT_NE(advice.find("8 threads on 2 cores"), std::string::npos) << advice;
}

TEST(MatmulSpeedWatch, ThreadsThatDidNotGetTheirCoresAreNamed) {
  // 0.6 CPU seconds over 2 threads x 1 s of wall: 30% busy.
  const std::string advice = watch_of(5, step(60, 200, 1, /*cpu_seconds=*/0.6)).advice(kFits);
  EXPECT_NE(advice.find("ran only 30% of their wall time"), std::string::npos) << advice;
}

TEST(MatmulSpeedWatch, ASlowRunWithoutAKnownCauseSaysSo) {
  const MatmulSpeedWatch watch = watch_of(5, step(60));
  EXPECT_NE(watch.advice(kFits).find("not known"), std::string::npos);
  EXPECT_EQ(watch.to_json(kFits)["slow"], true);
}

TEST(MatmulSpeedWatch, TheVerdictIsOnTheMedianStep) {
  MatmulSpeedWatch watch;
  for (double g : {20.0, 180.0, 190.0, 170.0, 30.0}) watch.on_step(step(g));  // two slow outliers
  EXPECT_EQ(watch.advice(kFits), "");
}

}  // namespace
}  // namespace rlrun::orchestrator
