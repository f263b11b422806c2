// run/run_recorder.h - what the run writes as it goes, and the loop's clock: metrics.jsonl (a line
// per step), samples.jsonl (a few completions), the progress line, profile.json (what the loop
// costs: tune/loop_profile.h, what `rlrun tune` reads) and the loop simulator's advice.
//
// Rules:
//  - The loop's time runs from the first dispatch of the RL steps (loop_started()) to the end of
//    the last one (loop_stopped()), a resumed run's earlier parts included; the trainer is idle
//    while it waits for a batch within it.
//  - metrics.jsonl and samples.jsonl are appended to, each first renamed <file>.1 once it passed
//    log_files_max_mb; a failure to write is logged, never the run's error. Completions are
//    untrusted bytes: invalid UTF-8 is replaced.
//  - The progress line: a terminal redraws one line in place; a pipe or file gets a line at most
//    every 30 s (and the last); logs/orchestrator.log gets every step.
//  - The trainer's matrix products are watched against the host's measured GEMM speed
//    (matmul_speed.h): a warning once when they run slow, and the verdict with its cause at the end.
//  - profile.json is written every kProfileEvery steps and at the end; the simulator's advice
//    refreshes the tune_* gauges every kAdviseEvery steps and, at the end, goes into the summary
//    and (when a side idled past advise_idle_threshold) into the log, saying what to change.
// Statistics: the loop's seconds and the trainer's idle seconds, and the advice at the end.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config/config.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/matmul_speed.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/step_tally.h"
#include "orchestrator/run/training/state.h"
#include "orchestrator/run/training/step_replay.h"
#include "orchestrator/run/workers/worker_slot.h"
#include "orchestrator/tune/loop_profile.h"

namespace rlrun::orchestrator {

class RunRecorder {
 public:
  static constexpr int64_t kProfileEvery = 10;  // steps between profile.json writes
  static constexpr int64_t kAdviseEvery = 50;   // steps between advice refreshes (Prometheus gauges)
  static constexpr int64_t kAdviseSteps = 30;   // steps those refreshes simulate (the end: the run's own)
  struct Stats {
    double loop_seconds = 0;          // from the first dispatch to the end of the last step
    double trainer_idle_seconds = 0;  // trainer waiting for a batch, within loop_seconds
    // The loop simulator's advice at the end: null when the run measured too little.
    nlohmann::ordered_json tuning;
    // The trainer's matrix products against the host's measured speed (MatmulSpeedWatch): null
    // when the run measured too little or the products were small.
    nlohmann::ordered_json trainer_matmul;
  };
  // What a step's line says beyond the step's record.
  struct StepLine {
    const StepRecord& record;
    double wait_seconds = 0, train_seconds = 0, sync_seconds = 0;
    const std::map<std::string, double>& trainer;  // rank 0's metrics
    std::optional<double> eval_accuracy;
    int64_t async_level = 0, discarded_total = 0, trainer_restarts = 0;
    std::map<std::string, double> reward_terms, reward_server_logs;  // since the last line
    std::optional<int64_t> reward_waiting;                          // with a reward server
  };

  // `steps`, `workers` and `metrics` must outlive the recorder. Its files go to `run_dir`.
  RunRecorder(const Config& config, const std::string& run_dir, const StepTally& steps,
              const std::vector<WorkerSlot>& workers, RunMetrics& metrics, LoopPort port);

  // ---- the loop's clock
  void resume_from(const ResumeState& state);  // the loop time and idle time of the parts before
  void loop_started();
  void loop_stopped();
  bool looping() const { return looping_; }
  double loop_seconds() const;  // this process's loop time plus that of the parts resumed from
  void trainer_idle(double seconds);

  // ---- files and lines
  void write_step_line(const StepLine& line);
  // `step`: evaluations, the steps completed; training samples, the step they train.
  void log_samples(const char* kind, int64_t step, const std::vector<nlohmann::ordered_json>& samples) const;
  void print_progress(double reward_mean, std::optional<double> eval_accuracy);

  // ---- what the loop costs
  tune::LoopProfile& profile() { return profile_; }
  // Where the run's processes are: nodes used and CPU cores (or GPUs) per node.
  void set_cluster_shape(int64_t nodes, int64_t slots_per_node);
  // After a step: its costs (rank 0's metrics), the profile file, the gauges. A step computed with
  // threads other than `base_trainer_threads` (lent by balance_cpu_threads) measured another
  // configuration: only how much faster it was is kept.
  void after_step(int64_t step, const std::map<std::string, double>& rank0, double train_seconds, double sync_seconds,
                  std::optional<int> base_trainer_threads, std::optional<double> reward_seconds);
  // At the end: the loop time, and the profile and advice when this process completed a step.
  void finish(std::optional<double> reward_seconds);
  const Stats& stats() const { return stats_; }

 private:
  void append_run_file(const std::string& path, const std::string& lines) const;
  void save_profile(std::optional<double> reward_seconds);
  void advise(bool at_end);
  MatmulSpeedWatch::Placement placement() const;

  const Config& config_;
  std::string run_dir_;
  const StepTally& steps_;
  const std::vector<WorkerSlot>& workers_;
  RunMetrics& metrics_;
  LoopPort port_;
  int64_t resumed_steps_ = 0;
  double resumed_loop_seconds_ = 0;
  bool looping_ = false;
  LoopPort::Clock::time_point loop_start_{};
  double loop_cpu_start_ = 0;  // the orchestrator's CPU seconds when the loop began
  tune::LoopProfile profile_;
  bool profile_write_failed_ = false;
  MatmulSpeedWatch matmul_;
  bool matmul_warned_ = false;
  Stats stats_;
};

}  // namespace rlrun::orchestrator
