// The planned prefill budget: a step's prefill takes about kPrefillStepSeconds at the measured
// speed, slower hosts get fewer tokens, and the plan stays within its bounds.
#include "rollout/prefill_budget.h"

#include <gtest/gtest.h>

namespace rlrun::rollout {
namespace {

engine::ModelConfig smollm2() {
  engine::ModelConfig c;
  c.hidden_size = 576;
  c.num_layers = 30;
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.intermediate_size = 1536;
  c.vocab_size = 49152;
  c.tie_embeddings = true;
  return c;
}

TEST(PrefillBudget, FlopsPerTokenCountTheWeightsMultipliedNotTheEmbedding) {
  const engine::ModelConfig c = smollm2();
  const double embedding = 49152.0 * 576;
  EXPECT_DOUBLE_EQ(prefill_flops_per_token(c), 2.0 * (static_cast<double>(c.num_parameters()) - embedding));
  EXPECT_NEAR(prefill_flops_per_token(c), 2 * 106.2e6, 1e6);  // SmolLM2-135M: 134.5M - 28.3M embedding
}

TEST(PrefillBudget, AStepTakesThePlannedSecondsAtTheMeasuredSpeed) {
  const engine::ModelConfig c = smollm2();
  // The host of the day-one defect: OpenBLAS's SSE3 fallback, ~40 GFLOP/s a thread, 2 threads.
  const int64_t slow = plan_prefill_tokens(c, 40, 2);
  EXPECT_NEAR(static_cast<double>(slow) * prefill_flops_per_token(c) / (40e9 * 2 * 0.5), kPrefillStepSeconds, 0.01);
  EXPECT_LT(slow, 32 * 45) << "the prefill that outlasted the heartbeat timeout is split over steps";
  const int64_t fast = plan_prefill_tokens(c, 110, 2);
  EXPECT_GT(fast, 2 * slow);
  EXPECT_GT(plan_prefill_tokens(c, 110, 4), fast);
}

TEST(PrefillBudget, StaysWithinItsBounds) {
  const engine::ModelConfig c = smollm2();
  EXPECT_EQ(plan_prefill_tokens(c, 0.01, 1), kMinPlannedPrefillTokens);
  EXPECT_EQ(plan_prefill_tokens(c, 0, 0), kMinPlannedPrefillTokens);
  EXPECT_EQ(plan_prefill_tokens(c, 1e6, 64), kMaxPlannedPrefillTokens);
}

}  // namespace
}  // namespace rlrun::rollout
