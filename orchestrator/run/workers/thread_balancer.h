// run/workers/thread_balancer.h - balance_cpu_threads carried out: the loop's idle time measured
// per window of steps (LoadWindows), CoreBalance (core_balance.h) decides, and SetThreads tells
// the workers.
//
// Rules:
//  - It applies where the threads are the run's to choose (the CPU backend, cpu_threads_per_worker
//    0) and the processes share cores: every worker on one node, a trainer and a rollout worker
//    among them (start()). Elsewhere nothing here sends anything.
//  - After each step but the last, a window's measures may change each side's threads: every live
//    worker whose role computes with other threads now is told (SetThreads), and so is a worker
//    that registers later (a replacement starts with its launch share).
//  - The rollout workers' CPU seconds scoring the KL reference (heartbeats) are taken out of their
//    idle time: scoring, they did not idle.
// Statistics: the threads each side started with, and every change with its step and reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/workers/core_balance.h"
#include "orchestrator/run/workers/worker_slot.h"

namespace rlrun::orchestrator {

class ThreadBalancer {
 public:
  struct Stats {
    struct Change {
      int64_t step = 0;  // after it
      CoreShare share;
      std::string reason;
    };
    std::optional<CoreShare> base;  // none: not balanced
    std::vector<Change> changes;
  };

  // `workers` (the fleet's) and `metrics` must outlive the balancer; it sets compute_threads.
  ThreadBalancer(const Config& config, std::vector<WorkerSlot>& workers, RunMetrics& metrics, LoopPort port);

  void start();  // when the loop starts: on, where it applies
  bool on() const { return balance_.has_value(); }
  // The threads base trainer ranks compute with (a step with others measured something else).
  std::optional<int> base_trainer_threads() const;
  // A worker registered (a new process, with the threads it was started with).
  void on_register(WorkerSlot& w);
  // A heartbeat's cumulative CPU seconds scoring the KL reference, per process.
  void on_scoring_seconds(WorkerSlot& w, double seconds);
  // After step `step` (of `steps`): `totals` without the scoring; a change is sent to every worker.
  void after_step(int64_t step, int64_t steps, LoopTotals totals);
  const Stats& stats() const { return stats_; }

 private:
  void send_threads(WorkerSlot& w);  // the threads its role computes with now, if it has others
  void note_threads(const WorkerSlot& w);  // the rlrun_worker_compute_threads gauge

  const Config& config_;
  std::vector<WorkerSlot>& workers_;
  RunMetrics& metrics_;
  LoopPort port_;
  std::optional<CoreBalance> balance_;
  LoadWindows windows_;
  double rollout_scoring_cpu_ = 0;  // CPU seconds of every rollout process scoring the KL reference
  Stats stats_;
};

}  // namespace rlrun::orchestrator
