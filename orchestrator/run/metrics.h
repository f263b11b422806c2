// run/metrics.h - the orchestrator's Prometheus metrics (design "Observability").
//
// Idle time is a counter, so rate() gives an idle fraction: rlrun_trainer_idle_seconds_total
// (the trainer waiting for a batch) and rlrun_rollout_idle_seconds_total{worker} (a rollout
// worker with no work in its lanes, or held back by the staleness gate), both from the
// orchestrator's view. Metrics live as long as the registry (the MetricsServer's).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/observe/metrics.h"
#include "common/protocol/protocol.h"

namespace rlrun::orchestrator {

// The reasons the dispatcher discards samples for (dispatch.cc), registered at 0 so a dashboard
// shows each one from the start; count_discard takes any reason, one missing here appears at its
// first discard.
inline constexpr const char* kDiscardReasons[] = {"generation_error", "group_incomplete", "advantage_error",
                                                  "zero_advantage", "stale", "too_long", "reward_unavailable"};

struct RunMetrics {
  RunMetrics(prometheus::Registry& registry, const std::vector<std::string>& rollout_workers,
             const std::vector<std::string>& processes);

  prometheus::Counter* trainer_idle_seconds;
  std::map<std::string, prometheus::Counter*> rollout_idle_seconds;  // by worker name
  prometheus::Histogram* step_wait_seconds;
  prometheus::Histogram* step_train_seconds;
  prometheus::Histogram* step_weight_sync_seconds;
  prometheus::Gauge* queue_depth;     // finished groups waiting for a batch
  prometheus::Gauge* in_flight_groups;
  prometheus::Gauge* async_level;
  prometheus::Gauge* max_async_rollout;  // the config's bound on async_level (alerts compare the two)
  prometheus::Gauge* trainer_step;
  prometheus::Histogram* sample_staleness;  // versions between sampling and training
  prometheus::Family<prometheus::Counter>* discarded;  // {reason}
  prometheus::Counter* cancelled;
  prometheus::Counter* tokens_generated;
  prometheus::Counter* tokens_trained;
  prometheus::Gauge* reward_mean;
  prometheus::Gauge* reward_std;
  prometheus::Gauge* advantage_abs_mean;
  prometheus::Gauge* eval_accuracy;   // held-out exact-match accuracy of the last evaluation
  prometheus::Counter* weight_sync_seconds;
  prometheus::Counter* weight_sync_bytes;
  std::map<std::string, prometheus::Gauge*> memory_bytes;       // by process, from heartbeats
  std::map<std::string, prometheus::Gauge*> peak_memory_bytes;  // by process
  std::map<std::string, prometheus::Gauge*> compute_threads;    // by process: CPU threads it computes with

  // What a rollout worker reports of itself in its heartbeats, labelled {worker}.
  struct RolloutGauges {
    prometheus::Gauge* running;           // sequences in the KV cache
    prometheus::Gauge* waiting;           // sequences queued (new or preempted)
    prometheus::Gauge* kv_blocks_used;
    prometheus::Gauge* kv_blocks_free;
    prometheus::Gauge* tokens_per_second;
    prometheus::Gauge* weight_version;
    prometheus::Gauge* weight_update_seconds;  // the last update's duration
    prometheus::Counter* preemptions;
    prometheus::Counter* engine_idle_seconds;  // the worker's own view: no sequence to run
    uint64_t last_preemptions = 0;
    double last_engine_idle_seconds = 0;
  };
  std::map<std::string, RolloutGauges> rollout;  // by worker name

  prometheus::Family<prometheus::Counter>* worker_restarts;  // {worker}: rlrun_worker_restarts_total
  prometheus::Counter* trainer_restarts;  // rlrun_trainer_restarts_total: restarts of the whole trainer group

  // task.reward: each term's mean over the samples scored between two steps (unweighted), and the
  // reward server's extra_logs likewise.
  prometheus::Family<prometheus::Gauge>* reward_term;         // {term}
  prometheus::Family<prometheus::Gauge>* reward_server_log;   // {name}
  // The http term's reward server (task.reward_url).
  prometheus::Family<prometheus::Counter>* reward_requests;   // {outcome="ok"|"failed"}
  prometheus::Gauge* reward_round_trip_seconds;               // median of the recent successful requests
  prometheus::Gauge* reward_waiting_samples;                  // submitted, not yet scored

  // Episodes of task.environment_url (run/samples/episodes.cc).
  prometheus::Family<prometheus::Counter>* episodes;  // {outcome="completed"|"retried"|"failed"|"cancelled"}
  prometheus::Gauge* episodes_running;                // attempts the environment is running now

  // `rlrun tune`'s simulation of this run (run/tuning.cc), refreshed every kAdviseEvery steps.
  prometheus::Family<prometheus::Gauge>* tune_seconds_per_step;  // {settings="current"|"recommended"}
  prometheus::Family<prometheus::Gauge>* tune_idle_fraction;     // {settings, side="trainer"|"rollout"}
  prometheus::Family<prometheus::Gauge>* tune_recommendation;    // {change}: 1 for the latest one

  void count_discard(const std::string& reason, double n = 1);
  // tune_recommendation{change} = 1 for `change` only (the previous one's series is removed).
  void set_recommendation(const std::string& change);
  prometheus::Gauge* recommendation_ = nullptr;
  void count_worker_restart(const std::string& worker);
  void observe_rollout(const std::string& worker, const Heartbeat& hb);
};

}  // namespace rlrun::orchestrator
