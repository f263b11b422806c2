// ThreadBalancer (run/workers/thread_balancer.h): it applies only where the run chooses the threads
// on one node; a window where the trainer never waits while the rollout workers idle lends the
// rollout cores to the trainer (SetThreads to every trainer rank, the change recorded), a worker
// registering later is told its share, and nothing changes after the last step.
#include "orchestrator/run/workers/thread_balancer.h"

#include <gtest/gtest.h>

#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using testing::PartEnv;

struct ThreadBalancerTest : ::testing::Test {
  PartEnv env;
  ThreadBalancerTest() {
    env.config.backend = BackendKind::kCpu;
    env.config.balance_cpu_threads = true;
    env.config.cpu_threads_per_worker = 0;
    env.config.trainer_num_workers = 1;
    env.config.inference_num_workers = 2;
    for (WorkerSlot& w : env.workers) {
      w.spec.node = "n0";
      w.spec.cpus = 2;
      w.compute_threads = 2;
    }
  }
  // The loop's totals after `step`: the trainer never waited, the rollout workers idled `idle` of it.
  static LoopTotals totals(int64_t step, double loop_seconds, double rollout_idle_each) {
    LoopTotals t;
    t.step = step;
    t.loop_seconds = loop_seconds;
    t.rollout_idle_seconds = 2 * rollout_idle_each;
    return t;
  }
};

TEST_F(ThreadBalancerTest, ItAppliesOnlyWhereTheRunChoosesTheThreadsOnOneNode) {
  ThreadBalancer off_by_key(env.config, env.workers, *env.metrics, env.port.port());
  env.config.cpu_threads_per_worker = 4;
  off_by_key.start();
  EXPECT_FALSE(off_by_key.on());
  env.config.cpu_threads_per_worker = 0;
  env.workers[2].spec.node = "n1";
  ThreadBalancer two_nodes(env.config, env.workers, *env.metrics, env.port.port());
  two_nodes.start();
  EXPECT_FALSE(two_nodes.on());
  env.workers[2].spec.node = "n0";
  ThreadBalancer on(env.config, env.workers, *env.metrics, env.port.port());
  on.start();
  EXPECT_TRUE(on.on());
  EXPECT_EQ(on.base_trainer_threads(), 2);
  EXPECT_EQ(on.stats().base->rollout_threads, 2);
}

TEST_F(ThreadBalancerTest, IdleRolloutCoresGoToTheBusyTrainerAndALateWorkerIsToldItsShare) {
  ThreadBalancer balancer(env.config, env.workers, *env.metrics, env.port.port());
  balancer.start();
  balancer.after_step(1, 100, totals(1, 1.0, 0.9));   // the first window starts after the first step
  balancer.after_step(3, 100, totals(3, 5.0, 4.5));   // rollout idle 90%, trainer 0%
  ASSERT_EQ(balancer.stats().changes.size(), 1u);
  const int lent = balancer.stats().changes[0].share.trainer_threads;
  EXPECT_GT(lent, 2);
  EXPECT_EQ(balancer.stats().changes[0].step, 3);
  const std::vector<SetThreads> told = env.port.sent_of<SetThreads>("trainer-0");
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].threads, static_cast<uint32_t>(lent));
  EXPECT_EQ(env.workers[0].compute_threads, lent);

  env.workers[0].compute_threads = 2;  // a restarted rank: the threads it was launched with
  balancer.on_register(env.workers[0]);
  EXPECT_EQ(env.port.sent_of<SetThreads>("trainer-0").size(), 2u) << "told the share of the moment";
}

TEST_F(ThreadBalancerTest, NothingChangesAfterTheLastStepAndScoringIsNotIdleness) {
  ThreadBalancer balancer(env.config, env.workers, *env.metrics, env.port.port());
  balancer.start();
  balancer.after_step(1, 3, totals(1, 1.0, 0.9));
  balancer.after_step(3, 3, totals(3, 5.0, 4.5));
  EXPECT_TRUE(balancer.stats().changes.empty()) << "no step left to use a change";

  ThreadBalancer scoring(env.config, env.workers, *env.metrics, env.port.port());
  scoring.start();
  scoring.after_step(1, 100, totals(1, 1.0, 0.9));
  scoring.on_scoring_seconds(env.workers[1], 7.0);  // cumulative CPU seconds, as heartbeats carry them
  scoring.on_scoring_seconds(env.workers[2], 7.0);
  scoring.after_step(3, 100, totals(3, 5.0, 4.5));
  EXPECT_TRUE(scoring.stats().changes.empty()) << "their idle time went to scoring the KL reference";
}

}  // namespace
}  // namespace rlrun::orchestrator
