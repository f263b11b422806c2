// The loop simulator against cases worked out by hand: a synchronous loop is the sum of its
// phases, an asynchronous one the slowest of them, lanes serialise groups, discards cost
// generation, processes on too few cores share them; and the advisor finds the bottleneck's cure.
#include "orchestrator/tune/loop_sim.h"

#include <gtest/gtest.h>

#include "orchestrator/tune/advisor.h"

namespace rlrun::orchestrator::tune {
namespace {

// Every completion has `length` tokens; an engine step costs `step` seconds whatever its batch;
// a trained token `per_token`; a weight sync `sync`.
LoopCosts simple_costs(int64_t length, double step, double per_token, double sync) {
  LoopCosts c;
  c.engine_step.fixed = step;
  c.train_seconds_per_token = per_token;
  c.weight_sync_seconds = sync;
  c.prompt_tokens = 4;
  c.completion_tokens = {{length, 1}};
  return c;
}

LoopSettings settings(int64_t async, int64_t lanes = 8) {
  LoopSettings s;
  s.max_async_rollout = async;
  s.prompts_batch_size_for_trainer = 4;
  s.group_size = 4;
  s.max_concurrent_prompts_per_server = lanes;
  s.max_num_seqs = 64;
  s.share_prompts_in_training = false;  // every sample trains its own copy of the prompt (kBatchTokens)
  return s;
}

Cluster gpus(int64_t n) { return {.nodes = 1, .slots_per_node = n, .devices = true}; }

// One batch: 4 groups x 4 samples of 4 + 6 tokens = 160 tokens.
constexpr double kBatchTokens = 160;

TEST(LoopSim, ASynchronousStepIsGenerationThenTrainingThenSync) {
  const LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);  // 6 steps of 10 ms; 160 ms; 50 ms
  const Prediction p = simulate(c, settings(0), gpus(2), {.steps = 20, .seed = 1});
  ASSERT_TRUE(p.feasible) << p.reason;
  const double step = 6 * 0.01 + kBatchTokens * 0.001 + 0.05;
  EXPECT_NEAR(p.seconds_per_step, step, 1e-9);
  EXPECT_NEAR(p.trainer_idle_fraction, 0.06 / step, 1e-9);
  EXPECT_NEAR(p.rollout_idle_fraction, (step - 0.06) / step, 1e-9);
  EXPECT_NEAR(p.groups_generated_per_step, 4, 1e-9);
  EXPECT_NEAR(p.mean_staleness, 0, 1e-9);
}

TEST(LoopSim, ARequestsRoundTripDelaysItsGroup) {
  LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  c.request_overhead_seconds = 0.02;
  const Prediction p = simulate(c, settings(0), gpus(2), {.steps = 20, .seed = 1});
  EXPECT_NEAR(p.seconds_per_step, 0.02 + 6 * 0.01 + kBatchTokens * 0.001 + 0.05, 1e-9);
}

TEST(LoopSim, AsynchronyHidesGenerationBehindTraining) {
  // Training (160 ms + 50 ms sync) is the bottleneck: with max_async_rollout 1 the next batch is
  // generated meanwhile, so after the first step each step costs training + sync only.
  const LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  const Prediction p = simulate(c, settings(1), gpus(2), {.steps = 200, .seed = 1});
  ASSERT_TRUE(p.feasible) << p.reason;
  const double steady = kBatchTokens * 0.001 + 0.05;
  EXPECT_NEAR(p.seconds_per_step, steady + 0.06 / 200, 1e-6);
  EXPECT_LT(p.trainer_idle_fraction, 0.01);
  EXPECT_GT(p.mean_staleness, 0.9);  // one step behind: the price of the speed
}

TEST(LoopSim, WhenGenerationIsTheBottleneckAsynchronyLeavesTheTrainerIdle) {
  // 400 ms generation; 16 x 44 tokens x 0.1 ms = 70.4 ms training + 10 ms sync
  const LoopCosts c = simple_costs(40, 0.01, 0.0001, 0.01);
  const Prediction p = simulate(c, settings(2, 4), gpus(2), {.steps = 200, .seed = 1});  // one batch at a time
  EXPECT_NEAR(p.seconds_per_step, 0.4, 0.01);
  EXPECT_NEAR(p.trainer_idle_fraction, 1 - 0.0804 / 0.4, 0.02);
  EXPECT_LT(p.rollout_idle_fraction, 0.01);
}

TEST(LoopSim, OneLanePerWorkerGeneratesTheGroupsOneAfterAnother) {
  const LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  const Prediction p = simulate(c, settings(0, 1), gpus(2), {.steps = 10, .seed = 1});
  EXPECT_NEAR(p.seconds_per_step, 4 * 6 * 0.01 + kBatchTokens * 0.001 + 0.05, 1e-9);
}

TEST(LoopSim, TwoRolloutWorkersHalveTheGenerationOfABatch) {
  const LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  LoopSettings s = settings(0, 1);
  s.inference_num_workers = 2;
  const Prediction p = simulate(c, s, gpus(3), {.steps = 10, .seed = 1});
  // Gloo-style weight sync scales with receivers only on CPU nodes: on devices it stays 50 ms.
  EXPECT_NEAR(p.seconds_per_step, 2 * 6 * 0.01 + kBatchTokens * 0.001 + 0.05, 1e-9);
}

TEST(LoopSim, DiscardedGroupsAreGeneratedAgain) {
  LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  c.group_discard_fraction = 0.5;
  const Prediction p = simulate(c, settings(0), gpus(2), {.steps = 400, .seed = 3});
  EXPECT_NEAR(p.groups_generated_per_step, 8, 0.6);
}

TEST(LoopSim, ProcessesOnTooFewCoresShareThem) {
  // One core, a rollout worker and a trainer: asynchrony cannot overlap what one core must do in
  // turn, so it buys nothing over the synchronous loop (both take generation + training).
  const LoopCosts c = simple_costs(16, 0.01, 0.0005, 0.0);  // 160 ms generation, 320 tokens: 160 ms training
  const Cluster one_core{.nodes = 1, .slots_per_node = 1};
  const Prediction sync = simulate(c, settings(0), one_core, {.steps = 100, .seed = 1});
  const Prediction async = simulate(c, settings(1), one_core, {.steps = 100, .seed = 1});
  EXPECT_NEAR(sync.seconds_per_step, 0.32, 1e-6);
  EXPECT_NEAR(async.seconds_per_step, 0.32, 0.01);
  // Two cores: the same work overlaps, and the step takes the longer phase.
  const Cluster two_cores{.nodes = 1, .slots_per_node = 2};
  EXPECT_NEAR(simulate(c, settings(1), two_cores, {.steps = 100, .seed = 1}).seconds_per_step, 0.16, 0.01);
}

// rollout_cpu_nice: a trainer and two rollout workers on two cores, the trainer the bottleneck
// (300 ms of training per step, 2 x 100 ms of generation). With equal weights the three share the
// cores while all are busy and the trainer gets 2/3 of one; niced rollout workers leave it a whole
// core and share the other, so the step takes its training alone.
TEST(LoopSim, NicedRolloutWorkersLeaveTheTrainerItsCore) {
  const LoopCosts c = simple_costs(6, 0.1 / 6, 0.3 / kBatchTokens, 0.0);
  const Cluster two_cores{.nodes = 1, .slots_per_node = 2};
  LoopSettings s = settings(2);
  s.inference_num_workers = 2;
  const double equal = simulate(c, s, two_cores, {.steps = 100, .seed = 1}).seconds_per_step;
  s.rollout_cpu_nice = 10;
  const double niced = simulate(c, s, two_cores, {.steps = 100, .seed = 1}).seconds_per_step;
  EXPECT_NEAR(niced, 0.30, 0.02);
  EXPECT_GT(equal, 1.1 * niced) << "equal " << equal << ", niced " << niced;
}

// Shared prompts: a group of 4 trains its 4-token prompt once (3 tokens, then the last one before
// each completion): 4 x (3 + 4 x 7) = 124 tokens instead of 160. In generation (always, whatever
// the training does) the first sample prefills the prompt and the others compute its last token
// only: 4 + 3 x 1 prefilled tokens per group.
TEST(LoopSim, SharedPromptsTrainFewerTokens) {
  const LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  LoopSettings s = settings(0);
  s.share_prompts_in_training = true;
  const Prediction p = simulate(c, s, gpus(2), {.steps = 20, .seed = 1});
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_NEAR(p.seconds_per_step, 6 * 0.01 + 124 * 0.001 + 0.05, 1e-9);
  LoopCosts prefill = c;
  prefill.engine_step.per_prefill_token = 0.001;
  const Prediction shared = simulate(prefill, s, gpus(2), {.steps = 20, .seed = 1});
  EXPECT_NEAR(shared.seconds_per_step, 6 * 0.01 + 4 * (4 + 3) * 0.001 + 124 * 0.001 + 0.05, 1e-9);
  s.share_prompts_in_training = false;
  const Prediction plain = simulate(prefill, s, gpus(2), {.steps = 20, .seed = 1});
  EXPECT_NEAR(plain.seconds_per_step - shared.seconds_per_step, (160 - 124) * 0.001, 1e-9);
}

TEST(LoopSim, InfeasibleSettingsSayWhy) {
  const LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  LoopSettings s = settings(0);
  s.number_of_minibatches = 3;  // does not divide 4
  EXPECT_FALSE(simulate(c, s, gpus(2), {}).feasible);
  s = settings(0);
  s.inference_num_workers = 4;
  const Prediction p = simulate(c, s, gpus(2), {});
  EXPECT_FALSE(p.feasible);
  EXPECT_EQ(p.reason, "more processes than devices");
}

// kl_reference_on: the reference's pass (0.5 ms per token: 80 ms a batch) is trainer work, or a
// pass on the rollout worker per kept group between its engine steps. Training-bound with an idle
// rollout worker (asynchronous), moving it takes it off the critical path; in a synchronous loop
// it only moves from one phase to the other.
TEST(LoopSim, TheKlReferenceOnTheRolloutWorkerLeavesTheTrainersCriticalPath) {
  LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  c.reference_seconds_per_token = 0.0005;
  LoopSettings on_trainer = settings(1);
  on_trainer.kl_reference = true;
  LoopSettings on_rollout = on_trainer;
  on_rollout.reference_on_rollout = true;
  const Prediction t = simulate(c, on_trainer, gpus(2), {.steps = 200, .seed = 1});
  const Prediction r = simulate(c, on_rollout, gpus(2), {.steps = 200, .seed = 1});
  const double train = kBatchTokens * 0.001 + 0.05;
  EXPECT_NEAR(t.seconds_per_step, train + kBatchTokens * 0.0005, 0.005);
  EXPECT_NEAR(r.seconds_per_step, train, 0.005);  // 60 ms generation + 80 ms scoring < 210 ms
  EXPECT_LT(r.rollout_idle_fraction, t.rollout_idle_fraction - 0.3) << "the worker now scores";

  LoopSettings sync = on_trainer;
  sync.max_async_rollout = 0;
  LoopSettings sync_rollout = sync;
  sync_rollout.reference_on_rollout = true;
  const double s_t = simulate(c, sync, gpus(2), {.steps = 20, .seed = 1}).seconds_per_step;
  const double s_r = simulate(c, sync_rollout, gpus(2), {.steps = 20, .seed = 1}).seconds_per_step;
  EXPECT_NEAR(s_t, 0.06 + train + kBatchTokens * 0.0005, 1e-6);
  EXPECT_NEAR(s_r, s_t, 1e-6);
}

// balance_cpu_threads on two cores, one trainer and one rollout worker of one thread each: a
// trainer-bound loop (1.6 s of training, 0.3 s of generation a step) lends the rollout's core to
// the trainer after a window of >= 2 steps and 2 s. The run measured its trainer 1.5x as fast with
// 2 threads: the lend pays at its trial, stays, and the loop runs up to 1.5x faster. Unmeasured,
// a lend gains nothing and is undone; a balanced loop (both sides busy) lends nothing.
TEST(LoopSim, BalancingLendsTheIdleRolloutsCoreToTheBusyTrainerAtTheSpeedTheRunMeasured) {
  const Cluster two_cores{.nodes = 1, .slots_per_node = 2};
  LoopCosts trainer_bound = simple_costs(6, 0.05, 0.01, 0.0);
  trainer_bound.trainer_lent_threads = 2;
  trainer_bound.trainer_lent_speed = 1.5;
  LoopSettings s = settings(1);
  const Prediction plain = simulate(trainer_bound, s, two_cores, {.steps = 200, .seed = 1});
  s.balance_cpu_threads = true;
  const Prediction balanced = simulate(trainer_bound, s, two_cores, {.steps = 200, .seed = 1});
  ASSERT_TRUE(balanced.feasible) << balanced.reason;
  EXPECT_NEAR(plain.seconds_per_step, kBatchTokens * 0.01, 0.01);
  EXPECT_EQ(plain.trainer_threads, 1);
  EXPECT_EQ(balanced.trainer_threads, 2);
  EXPECT_EQ(balanced.rollout_threads, 1);
  EXPECT_LT(balanced.seconds_per_step, 0.75 * plain.seconds_per_step);
  EXPECT_GT(balanced.seconds_per_step, plain.seconds_per_step / 1.5 - 1e-9);

  LoopCosts unmeasured = trainer_bound;
  unmeasured.trainer_lent_speed = 0;
  const Prediction tried = simulate(unmeasured, s, two_cores, {.steps = 200, .seed = 1});
  EXPECT_EQ(tried.trainer_threads, 1) << "the trial undid it";
  EXPECT_DOUBLE_EQ(tried.seconds_per_step, plain.seconds_per_step);

  const LoopCosts even = simple_costs(32, 0.05, 0.0028, 0.0);  // 1.6 s of generation, 576 tokens: 1.61 s of training
  s.balance_cpu_threads = false;
  const Prediction even_plain = simulate(even, s, two_cores, {.steps = 100, .seed = 1});
  s.balance_cpu_threads = true;
  const Prediction even_balanced = simulate(even, s, two_cores, {.steps = 100, .seed = 1});
  EXPECT_EQ(even_balanced.trainer_threads, 1);
  EXPECT_EQ(even_balanced.rollout_threads, 1);
  EXPECT_DOUBLE_EQ(even_balanced.seconds_per_step, even_plain.seconds_per_step);
  // On devices nothing is lent.
  EXPECT_EQ(simulate(trainer_bound, s, gpus(2), {.steps = 50, .seed = 1}).trainer_threads, 1);
}

TEST(Advisor, MovesTheKlReferenceToAnIdleRolloutWorker) {
  LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  c.reference_seconds_per_token = 0.0005;
  LoopSettings now = settings(1);
  now.kl_reference = true;
  const Advice a = advise(c, now, gpus(2), {.steps = 60, .seed = 1});
  ASSERT_TRUE(a.change);
  EXPECT_TRUE(a.recommended.settings.reference_on_rollout);
  EXPECT_NE(describe_change(now, a.recommended.settings).find("kl_reference_on: trainer -> rollout"), std::string::npos);
  // A LoRA run keeps it on the trainer (the rollout's reference is not implemented for adapters).
  now.reference_stays_on_trainer = true;
  for (const Candidate& k : advise(c, now, gpus(2), {.steps = 60, .seed = 1}).candidates)
    EXPECT_FALSE(k.settings.reference_on_rollout);
  now.reference_stays_on_trainer = false;
  // Without a KL term there is nothing to move.
  now.kl_reference = false;
  for (const Candidate& k : advise(c, now, gpus(2), {.steps = 60, .seed = 1}).candidates)
    EXPECT_FALSE(k.settings.reference_on_rollout);
}

TEST(Advisor, RecommendsMoreRolloutWorkersWhenGenerationIsTheBottleneck) {
  // A worker generates one token per 10 ms however it batches: only more workers help.
  LoopCosts c = simple_costs(40, 0.0, 0.0001, 0.01);
  c.engine_step.per_sequence = 0.01;
  LoopSettings now = settings(1, 1);
  const Advice a = advise(c, now, gpus(8), {.steps = 60, .seed = 1});
  ASSERT_TRUE(a.change);
  EXPECT_GT(a.recommended.settings.inference_num_workers, 1);
  EXPECT_LT(a.recommended.prediction.seconds_per_step, a.current.prediction.seconds_per_step / 2);
  EXPECT_NE(describe_change(now, a.recommended.settings).find("inference_num_workers: 1 -> "), std::string::npos);
  for (size_t i = 1; i < a.candidates.size(); ++i)
    EXPECT_LE(a.candidates[i - 1].prediction.seconds_per_step, a.candidates[i].prediction.seconds_per_step);
}

TEST(Advisor, KeepsSettingsThatNothingBeats) {
  // Training is the bottleneck on one device pair with asynchrony already on: nothing helps.
  const LoopCosts c = simple_costs(6, 0.01, 0.001, 0.05);
  const Advice a = advise(c, settings(1), gpus(2), {.steps = 60, .seed = 1});
  EXPECT_FALSE(a.change);
  EXPECT_EQ(describe_change(a.current.settings, a.recommended.settings), "");
}

}  // namespace
}  // namespace rlrun::orchestrator::tune
