// The orchestrator's Prometheus metrics: what rollout heartbeats turn into.
#include "orchestrator/run/metrics.h"

#include <gtest/gtest.h>

#include "common/observe/log.h"

namespace rlrun::orchestrator {
namespace {

TEST(RunMetrics, RolloutHeartbeatsBecomeLabelledGaugesAndCounters) {
  prometheus::Registry registry;
  RunMetrics metrics(registry, {"rollout-0"}, {"trainer-0", "rollout-0"});
  Heartbeat hb;
  hb.active_requests = 5;
  hb.queued_requests = 2;
  hb.kv_blocks_used = 30;
  hb.kv_blocks_free = 98;
  hb.tokens_per_second = 123.5f;
  hb.weight_version = 7;
  hb.last_weight_sync_seconds = 0.25;
  hb.preemptions = 3;
  hb.idle_seconds = 1.5;
  metrics.observe_rollout("rollout-0", hb);
  hb.preemptions = 4;  // totals since the worker started: the counter advances by 1
  hb.idle_seconds = 2.0;
  metrics.observe_rollout("rollout-0", hb);
  metrics.observe_rollout("trainer-0", hb);  // not a rollout worker: ignored

  const std::string text = serialize_metrics(registry);
  for (const char* expected :
       {"rlrun_rollout_running_sequences{worker=\"rollout-0\"} 5", "rlrun_rollout_waiting_sequences{worker=\"rollout-0\"} 2",
        "rlrun_rollout_kv_blocks_used{worker=\"rollout-0\"} 30", "rlrun_rollout_kv_blocks_free{worker=\"rollout-0\"} 98",
        "rlrun_rollout_tokens_per_second{worker=\"rollout-0\"} 123.5", "rlrun_rollout_weight_version{worker=\"rollout-0\"} 7",
        "rlrun_rollout_weight_update_seconds{worker=\"rollout-0\"} 0.25",
        "rlrun_rollout_preemptions_total{worker=\"rollout-0\"} 4",
        "rlrun_rollout_engine_idle_seconds_total{worker=\"rollout-0\"} 2"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
  EXPECT_EQ(text.find("worker=\"trainer-0\""), std::string::npos);
}

TEST(RunMetrics, WorkerRestartsAreCountedPerWorkerFromZero) {
  prometheus::Registry registry;
  RunMetrics metrics(registry, {"rollout-0", "rollout-1"}, {"trainer-0", "rollout-0", "rollout-1"});
  metrics.count_worker_restart("rollout-1");
  metrics.count_worker_restart("rollout-1");
  const std::string text = serialize_metrics(registry);
  EXPECT_NE(text.find("rlrun_worker_restarts_total{worker=\"rollout-0\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("rlrun_worker_restarts_total{worker=\"rollout-1\"} 2"), std::string::npos) << text;
}

TEST(RunMetrics, TrainerRestartsAreCountedFromZero) {
  prometheus::Registry registry;
  RunMetrics metrics(registry, {"rollout-0"}, {"trainer-0", "rollout-0"});
  EXPECT_NE(serialize_metrics(registry).find("rlrun_trainer_restarts_total 0"), std::string::npos);
  metrics.trainer_restarts->Increment();
  const std::string text = serialize_metrics(registry);
  EXPECT_NE(text.find("rlrun_trainer_restarts_total 1"), std::string::npos) << text;
}

// A dashboard's "discarded by reason" panel and the staleness alert need these series before the
// first discard and without a config at hand.
TEST(RunMetrics, DiscardReasonsAndTheAsyncBoundExistFromTheStart) {
  prometheus::Registry registry;
  RunMetrics metrics(registry, {"rollout-0"}, {"trainer-0", "rollout-0"});
  metrics.count_discard("stale", 8);
  const std::string text = serialize_metrics(registry);
  for (const char* reason : kDiscardReasons) {
    const std::string expected = str("rlrun_samples_discarded_total{reason=\"", reason, "\"} ",
                                     std::string(reason) == "stale" ? "8" : "0");
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
  EXPECT_NE(text.find("rlrun_max_async_rollout 0"), std::string::npos) << text;
}

}  // namespace
}  // namespace rlrun::orchestrator
