// LoopProfile: what the orchestrator records survives profile.json, a restarted worker's
// measurements are kept, the costs are fitted from it, and a damaged file is refused by name.
#include "orchestrator/tune/loop_profile.h"

#include <gtest/gtest.h>

#include "orchestrator/tune/loop_costs.h"
#include "orchestrator/tune/tune.h"

namespace rlrun::orchestrator::tune {
namespace {

rollout::StepCostSums engine_sums(int steps, double seconds_per_sequence) {
  rollout::StepCostSums s;
  for (int i = 0; i < steps; ++i) {
    const rollout::StepShape shape{i % 8 + 1, 0, 0};
    s.add(shape, seconds_per_sequence * static_cast<double>(shape.decoding), 0);
  }
  return s;
}

LoopProfile measured_profile() {
  LoopProfile p;
  p.threads = 1;
  p.parameters = 1000;
  p.nodes = 1;
  p.slots_per_node = 2;
  EXPECT_TRUE(p.on_heartbeat("rollout-0", engine_sums(40, 0.002).flat(), 0.01));
  EXPECT_TRUE(p.on_heartbeat("rollout-0", engine_sums(80, 0.002).flat(), 0.01));  // cumulative: replaces
  p.on_group(12, {3, 3, 5, 5}, 0.002);
  p.on_group(12, {5, 5, 5, 5}, 0.004);
  p.on_group_discarded();
  // rank 0 spent 2 CPU s on 1000 tokens, a quarter of its compute in the optimizer (1 step)
  p.on_train_step({{"cpu_seconds", 2.0}, {"tokens", 1000}, {"optimizer_steps", 1}, {"seconds_forward_backward", 1.5},
                   {"seconds_optimizer", 0.5}},
                  2.25, 0.1);
  p.set_loop(10.0, 1.0);
  return p;
}

TEST(LoopProfile, CostsComeFromWhatTheRunMeasured) {
  Result<LoopCosts> c = fit_costs(measured_profile());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NEAR(c->engine_step.per_sequence, 0.002, 1e-9);
  EXPECT_NEAR(c->train_seconds_per_token, 1.5 / 1000, 1e-12);
  EXPECT_NEAR(c->train_seconds_per_optimizer_step, 0.5, 1e-12);
  EXPECT_NEAR(c->train_seconds_fixed, 0.25, 1e-12);
  EXPECT_NEAR(c->weight_sync_seconds, 0.1, 1e-12);
  EXPECT_NEAR(c->weight_load_seconds, 0.01, 1e-12);
  EXPECT_NEAR(c->orchestrator_cores, 0.1, 1e-12);
  EXPECT_NEAR(c->prompt_tokens, 12, 1e-12);
  EXPECT_NEAR(c->request_overhead_seconds, 0.003, 1e-12);
  EXPECT_NEAR(c->group_discard_fraction, 0.5, 1e-12);
  EXPECT_EQ(c->completion_tokens, (std::map<int64_t, int64_t>{{3, 2}, {5, 6}}));
}

// The KL reference's pass is split from the trainer's per-token cost when the trainer ran it
// (a fifth of rank 0's compute wall here), or taken from the rollout workers' CPU when they did.
TEST(LoopProfile, TheKlReferencesCostIsItsOwn) {
  LoopProfile p = measured_profile();
  p.on_train_step({{"cpu_seconds", 2.0}, {"tokens", 1000}, {"optimizer_steps", 1}, {"seconds_forward_backward", 1.5},
                   {"seconds_reference", 0.5}, {"reference_tokens", 1000}, {"seconds_optimizer", 0.5}},
                  2.75, 0.1);
  Result<LoopCosts> c = fit_costs(p);
  ASSERT_TRUE(c.ok()) << c.status().message();
  // 4 CPU s over both steps; compute walls 2 + 2.5 s: optimizer 1 / 4.5, reference 0.5 / 4.5
  EXPECT_NEAR(c->reference_seconds_per_token, 4.0 * 0.5 / 4.5 / 1000, 1e-12);
  EXPECT_NEAR(c->train_seconds_per_token, 4.0 * 3.0 / 4.5 / 2000, 1e-12);

  LoopProfile r = measured_profile();
  r.on_reference_scoring("rollout-0", 0.3, 500);
  r.on_reference_scoring("rollout-0", 0.6, 1000);  // cumulative: replaces
  r.on_reference_scoring("rollout-0", 0.2, 200);   // a new process: the old sums are kept
  c = fit_costs(r);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->reference_seconds_per_token, 0.8 / 1200, 1e-12);
  EXPECT_NEAR(c->train_seconds_per_token, 1.5 / 1000, 1e-12) << "the trainer ran no reference pass";
  Result<LoopProfile> back = LoopProfile::from_json(r.to_json());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_NEAR(back->reference().rollout_tokens, 1200, 1e-9);
  nlohmann::json old = r.to_json();  // a profile written before the reference's sums
  old.erase("reference_rollout_tokens");
  EXPECT_TRUE(LoopProfile::from_json(old).ok());
}

// Steps computed with threads lent by balance_cpu_threads are their own sums: the speed they
// measured per token against the run's own share (1.5 s per 1000 tokens; lent: 2 s per 2000).
TEST(LoopProfile, StepsWithLentThreadsMeasureTheLendsSpeed) {
  LoopProfile p = measured_profile();
  Result<LoopCosts> c = fit_costs(p);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->trainer_lent_threads, 0);
  EXPECT_EQ(c->trainer_lent_speed, 0) << "no lent step measured";
  p.on_lent_train_step({{"tokens", 1000}, {"seconds_forward_backward", 1.0}, {"seconds_optimizer", 0.5}}, 2);
  p.on_lent_train_step({{"tokens", 1000}, {"seconds_forward_backward", 1.0}}, 2);
  c = fit_costs(p);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->trainer_lent_threads, 2);
  EXPECT_NEAR(c->trainer_lent_speed, 1.5, 1e-12);
  EXPECT_NEAR(c->train_seconds_per_token, 1.5 / 1000, 1e-12) << "the run's own share's cost is unchanged";
  Result<LoopProfile> back = LoopProfile::from_json(p.to_json());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->lent_train().steps, 2);
  EXPECT_EQ(back->lent_train().threads, 2);
  EXPECT_NEAR(back->lent_train().tokens, 2000, 1e-9);
  nlohmann::json old = p.to_json();  // a profile written before the lent sums
  for (const char* key : {"lent_train_steps", "lent_trainer_threads", "lent_train_compute_seconds", "lent_train_tokens"})
    old.erase(key);
  Result<LoopProfile> older = LoopProfile::from_json(old);
  ASSERT_TRUE(older.ok()) << older.status().message();
  EXPECT_EQ(older->lent_train().steps, 0);
}

// The run's cluster: its node and cores, and on CPU the gradient all-reduce's rate taken from
// the weight sync's (4 bytes x 1000 parameters to one receiver in 0.1 s: 40 kB/s).
TEST(LoopProfile, TheClusterComesFromWhereTheRunRan) {
  LoopProfile p = measured_profile();
  Cluster c = cluster_from(p);
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.slots_per_node, 2);
  EXPECT_FALSE(c.devices);
  EXPECT_NEAR(c.allreduce_bytes_per_second, 4000 / 0.1, 1e-6);
  p.rollout_workers = 2;  // the same round time for two receivers: twice the rate
  EXPECT_NEAR(cluster_from(p).allreduce_bytes_per_second, 2 * 4000 / 0.1, 1e-6);
  p.on_devices = true;  // NCCL: not the weight sync's transport
  EXPECT_EQ(cluster_from(p).allreduce_bytes_per_second, Cluster{}.allreduce_bytes_per_second);
}

TEST(LoopProfile, ARestartedWorkersEarlierStepsAreKept) {
  LoopProfile p = measured_profile();
  ASSERT_TRUE(p.on_heartbeat("rollout-0", engine_sums(10, 0.002).flat(), 0));  // a new process: fewer steps
  EXPECT_EQ(p.engine_steps().steps(), 90);
}

TEST(LoopProfile, RoundTripsThroughJson) {
  const LoopProfile p = measured_profile();
  Result<LoopProfile> back = LoopProfile::from_json(p.to_json());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->to_json(), p.to_json());
}

TEST(LoopProfile, ADamagedFileIsRefusedNamingTheField) {
  nlohmann::json j = measured_profile().to_json();
  j["train_tokens"] = "many";
  Result<LoopProfile> r = LoopProfile::from_json(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("train_tokens"), std::string::npos) << r.status().message();
  j = measured_profile().to_json();
  j["engine_step_costs"] = nlohmann::json::array({1, 2, 3});
  EXPECT_FALSE(LoopProfile::from_json(j).ok());
  j = measured_profile().to_json();
  j["completion_tokens"] = nlohmann::json::array({nlohmann::json::array({-1, 4})});
  EXPECT_FALSE(LoopProfile::from_json(j).ok());
  EXPECT_FALSE(LoopProfile::from_json(nlohmann::json::array()).ok());
}

TEST(LoopProfile, TooLittleMeasuredSaysSo) {
  LoopProfile empty;
  Result<LoopCosts> c = fit_costs(empty);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("let it run"), std::string::npos);
  EXPECT_FALSE(LoopProfile().on_heartbeat("rollout-0", std::vector<double>{1.0, 2.0}, 0));
}

}  // namespace
}  // namespace rlrun::orchestrator::tune
