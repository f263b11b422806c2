// tune/loop_costs.h - what a run measured, as the loop simulator (tune/loop_sim.h) needs it: the
// cost of a rollout engine step, of training a token and an optimizer step, of a weight sync; the
// lengths of prompts and completions; how many groups are discarded.
//
// Units: work in seconds of one process at `threads` threads running alone (on a CPU node: CPU
// seconds / threads, so what the neighbours did while it ran does not count); other times wall
// seconds. fit_costs() derives them from a run's profile (tune/loop_profile.h).
#pragma once

#include <cstdint>
#include <map>

#include "common/status.h"
#include "orchestrator/tune/loop_profile.h"
#include "rollout/step_cost.h"

namespace rlrun::orchestrator::tune {

struct LoopCosts {
  rollout::StepCost engine_step;           // one rollout engine step
  double train_seconds_per_token = 0;      // forward + backward, one rank, per packed token
  double train_seconds_per_optimizer_step = 0;
  double train_seconds_fixed = 0;          // per trainer step: batch transfer, packing, replies (wall)
  // The KL reference's forward pass, per token it computes (on whichever side measured it; the
  // same work on either: one process alone). 0: the run had no KL term.
  double reference_seconds_per_token = 0;
  double weight_sync_seconds = 0;          // one sync round with `measured_rollout_workers` receivers (wall)
  double weight_load_seconds = 0;          // a rollout worker's pause to load a version (wall)
  double reward_seconds = 0;               // last sample back -> group scored (wall)
  double request_overhead_seconds = 0;     // a group's round trip beyond the worker's time (wall)
  double orchestrator_cores = 0;           // the orchestrator's own CPU use, in cores, while looping
  double prompt_tokens = 0;                // mean prompt length
  std::map<int64_t, int64_t> completion_tokens;  // measured completion lengths: length -> samples
  double group_discard_fraction = 0;       // finished groups discarded (no reward spread, errors)
  int64_t parameters = 0;                  // model parameters (gradient all-reduce bytes = 4 x)
  int64_t threads = 1;                     // threads per process when measured
  // balance_cpu_threads: a trainer rank computing with `trainer_lent_threads` (lent by the rollout
  // workers) ran `trainer_lent_speed` times as fast per token as with its own share, measured in
  // the run, its neighbours' load included. 0: the run never computed with lent threads.
  int64_t trainer_lent_threads = 0;
  double trainer_lent_speed = 0;
  int64_t measured_rollout_workers = 1;
  bool on_devices = false;                 // measured on GPUs: work is wall time
};

// The costs of a run's profile; invalid_argument naming what is missing when the profile has too
// little to go on (no engine step, no trainer step).
Result<LoopCosts> fit_costs(const LoopProfile& profile);

}  // namespace rlrun::orchestrator::tune
