// tune/loop_profile.h - what a run measures for `rlrun tune`: the orchestrator feeds a LoopProfile
// as the run goes (heartbeats, groups, train steps) and writes it to <run_dir>/profile.json every
// few steps and at the end, so a running run can be tuned too. tune/loop_costs.h turns it into the
// simulator's costs.
//
// Sums, not samples: the file stays a few KB however long the run (completion lengths are a
// histogram). Threads: the orchestrator's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "rollout/step_cost.h"

namespace rlrun::orchestrator::tune {

class LoopProfile {
 public:
  // ---- what the run is (the orchestrator sets them once)
  int64_t rollout_workers = 1;
  int64_t trainer_ranks = 1;
  int64_t threads = 1;        // compute threads per worker process
  bool on_devices = false;    // backend cuda: one GPU per process
  int64_t nodes = 1;          // where the run's processes ran ...
  int64_t slots_per_node = 1; // ... and the CPU cores (or GPUs) of each node
  int64_t parameters = 0;
  // For the reader, not the simulator (from_json leaves them empty): the host's CPU, features,
  // GEMM kernels and measured speed (engine::HostCompute), and the trainer's matrix products
  // against it (run/matmul_speed.h).
  nlohmann::json host;
  nlohmann::json trainer_matmul;

  // ---- what it measured
  // A rollout worker's heartbeat: its cumulative engine-step sums (rollout/step_cost.h) and the
  // duration of its last weight load. A worker whose sums went back (a restarted process) has its
  // old ones kept. Malformed sums are ignored (false).
  bool on_heartbeat(const std::string& worker, std::span<const double> engine_step_costs, double last_weight_load_seconds);
  // A group whose samples are all back: its prompt length, every sample's completion length, and
  // what its request's round trip took beyond the worker's own time (queue + steps).
  void on_group(int64_t prompt_tokens, const std::vector<int64_t>& completion_tokens, double request_overhead_seconds);
  void on_group_discarded() { ++groups_discarded_; }
  // A rollout worker's cumulative KL reference scoring (kl_reference_on: rollout, Heartbeat): CPU
  // seconds and tokens computed. A worker whose sums went back (a new process) has its old ones kept.
  void on_reference_scoring(const std::string& worker, double cpu_seconds, double tokens);
  // An RL step: rank 0's TrainResult metrics ("cpu_seconds", "tokens", "optimizer_steps",
  // "seconds_forward_backward", "seconds_recompute", "seconds_reference", "seconds_optimizer"), the
  // orchestrator's train
  // and weight-sync wall times.
  void on_train_step(const std::map<std::string, double>& rank0, double train_seconds, double sync_seconds);
  // The loop so far: its wall seconds and the orchestrator's CPU seconds within it.
  void set_loop(double loop_seconds, double orchestrator_cpu_seconds);
  void set_reward_seconds(double seconds) { reward_seconds_ = seconds; }

  // ---- read back
  rollout::StepCostSums engine_steps() const;  // every worker's, all their lives
  struct TrainSums {
    int64_t steps = 0;
    double cpu_seconds = 0, wall_seconds = 0;         // rank 0's CPU; the orchestrator's train wall
    double compute_seconds = 0, optimizer_seconds = 0;  // rank 0's wall in forward/backward(+recompute), optimizer
    double tokens = 0, optimizer_steps = 0;           // rank 0's
    double sync_seconds = 0;
  };
  const TrainSums& train() const { return train_; }
  // Rank 0's steps computed with threads lent by balance_cpu_threads (left out of train()): their
  // forward/backward wall seconds and tokens, at `threads` threads per rank.
  struct LentSums {
    int64_t steps = 0, threads = 0;
    double compute_seconds = 0, tokens = 0;
  };
  const LentSums& lent_train() const { return lent_train_; }
  void on_lent_train_step(const std::map<std::string, double>& rank0, int64_t threads);
  // The KL reference's forward passes: rank 0's wall seconds and tokens (kl_reference_on: trainer,
  // "seconds_reference", "reference_tokens"), the rollout workers' CPU seconds and tokens.
  struct ReferenceSums {
    double trainer_seconds = 0, trainer_tokens = 0;
    double rollout_cpu_seconds = 0, rollout_tokens = 0;
  };
  ReferenceSums reference() const;
  double mean_weight_load_seconds() const { return loads_ ? load_seconds_ / static_cast<double>(loads_) : 0; }
  double reward_seconds() const { return reward_seconds_; }
  double loop_seconds() const { return loop_seconds_; }
  double orchestrator_cpu_seconds() const { return orchestrator_cpu_seconds_; }
  int64_t groups_finished() const { return groups_finished_; }
  int64_t groups_discarded() const { return groups_discarded_; }
  double mean_request_overhead_seconds() const {
    return groups_finished_ ? request_overhead_seconds_ / static_cast<double>(groups_finished_) : 0;
  }
  double mean_prompt_tokens() const { return groups_finished_ ? prompt_tokens_ / static_cast<double>(groups_finished_) : 0; }
  const std::map<int64_t, int64_t>& completion_histogram() const { return completions_; }

  nlohmann::json to_json() const;
  // invalid_argument naming the field at fault (the file is untrusted).
  static Result<LoopProfile> from_json(const nlohmann::json& j);
  Status write(const std::string& path) const;  // atomically
  static Result<LoopProfile> read(const std::string& path);

 private:
  std::map<std::string, rollout::StepCostSums> current_;  // by worker: its process's latest sums
  rollout::StepCostSums retired_;                         // of processes that were replaced
  std::map<std::string, double> last_load_;               // by worker, to count each load once
  double load_seconds_ = 0;
  int64_t loads_ = 0;
  TrainSums train_;
  LentSums lent_train_;
  ReferenceSums reference_retired_;                         // trainer sums, and replaced rollout processes'
  std::map<std::string, std::pair<double, double>> reference_current_;  // by rollout worker: (CPU seconds, tokens)
  double reward_seconds_ = 0, loop_seconds_ = 0, orchestrator_cpu_seconds_ = 0;
  int64_t groups_finished_ = 0, groups_discarded_ = 0;
  double prompt_tokens_ = 0;
  double request_overhead_seconds_ = 0;
  std::map<int64_t, int64_t> completions_;  // length -> samples
};

}  // namespace rlrun::orchestrator::tune
