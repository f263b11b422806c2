// memory_advice.h - the memory plan of a whole run (from its Config), whether it fits the
// devices, and the levers that would make it fit, in order of cost.
//
// Device memory per process: with backend cuda, `device_memory_gb` GiB per GPU (plan a GPU run
// anywhere with --set backend=cuda); with backend cpu, this host's RAM (/proc/meminfo MemTotal),
// which every process started on the host shares (launcher local/auto; with launcher slurm each
// process is checked against one node's RAM).
//
// What fits means:
//   trainer rank    its peak (forward/backward or weight send) + runtime reserve <= device
//   rollout worker  weights + workspace + ONE max_model_len sequence of KV <= the worker's share
//                   (gpu_memory_utilization x device); fewer sequences than max_num_seqs fitting
//                   is not a failure (they wait in the queue) but earns advice
//   cpu, one host   the sum of every process's budget <= host RAM
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/exit_codes.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "orchestrator/plan/memory_plan.h"

namespace rlrun::orchestrator {

struct DeviceMemory {
  double bytes = 0;
  std::string source;  // "device_memory_gb: 80", "host RAM (/proc/meminfo MemTotal)"
};

// The memory every process of `config` gets (see above). io_error when /proc/meminfo is unreadable.
Result<DeviceMemory> device_memory_for(const Config& config);

struct RunPlan {
  std::string backend;             // "cpu" | "cuda"
  DeviceMemory device;
  bool shared_host = false;        // cpu on one host: all processes share device.bytes
  engine::ModelConfig model;
  PrecisionPolicy precision;
  int64_t trainer_ranks = 1, rollout_workers = 1, tensor_parallel_size = 1, max_num_seqs = 1;
  double runtime_reserve = 0;      // per process, outside the backend's allocations (cuda context)
  TrainerPlanInputs trainer_inputs;
  TrainerBudget trainer;
  RolloutPlanInputs rollout_inputs;
  RolloutBudget rollout;

  double trainer_need() const { return trainer.peak() + runtime_reserve; }
  // The rollout worker's bytes with its pool as planned, and with room for all max_num_seqs.
  // (A GPU worker's runtime reserve is inside its gpu_memory_utilization share.)
  double rollout_need() const { return rollout.total() + (backend == "cuda" ? runtime_reserve : 0.0); }
  double rollout_demand() const;
  double host_total() const;       // every process of the run, summed
  bool trainer_fits() const;
  bool rollout_fits() const;       // at least one max_model_len sequence fits
  bool host_fits() const { return !shared_host || host_total() <= device.bytes; }
  bool fits() const { return trainer_fits() && rollout_fits() && host_fits(); }
};

// The plan of `config` on `device` (nullptr: device_memory_for(config)). invalid_argument when the
// model shape cannot be built.
Result<RunPlan> plan_run(const Config& config, const DeviceMemory* device = nullptr);

// One change to the config and what it buys.
struct MemoryLever {
  std::string process;   // "trainer" | "rollout"
  std::string change;    // as --set arguments: "gradient_checkpointing=true"
  double saves_bytes = 0;
  bool fits_after = false;  // the whole plan fits with this change alone
  int64_t sequences_waiting_after = 0;  // rollout sequences that still wait after it
  std::string cost;
  Config config;             // the config with this change
};

// The levers that reduce the memory of a process that does not fit (or whose sequences wait),
// in order of cost: gradient checkpointing, distributed optimizer, smaller micro-batches
// (micro_batch_rows, then seq_len), fewer concurrent sequences (max_num_seqs), lower
// max_model_len, more trainer ranks, tensor parallelism for rollout. Only levers that save bytes
// for this config are listed.
std::vector<MemoryLever> memory_levers(const Config& config, const RunPlan& plan);

// The cheapest levers applied one after another until the plan fits: each step takes the first
// lever (in order of cost) for a process that does not fit that either makes the plan fit or
// closes at least a tenth of that process's shortfall. `fits` false when no lever helps enough.
struct LeverPath {
  std::vector<MemoryLever> steps;
  std::vector<std::string> settings;  // the steps' "key=value"s, the last value of a key winning
  bool fits = false;
};
LeverPath levers_until_fit(const Config& config, const RunPlan& plan);

// "a=1 b=2" -> "--set a=1 --set b=2"
std::string as_set_args(const std::string& change);

// What `rlrun CONFIG` calls before launching anything: OK when the plan fits; otherwise
// resource_exhausted with the plan's problems and the levers (one per line).
Status check_plan_fits(const Config& config);

// The problems of a plan that does not fit, one line each ("trainer rank needs 130.2 GiB ...").
std::vector<std::string> plan_problems(const RunPlan& plan);

}  // namespace rlrun::orchestrator
