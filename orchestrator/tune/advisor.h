// tune/advisor.h - which settings to try: simulates the run's own settings and a grid of others
// (tune/loop_sim.h) and names the best.
//
// The grid varies what changes speed without changing what a step trains: inference_num_workers,
// trainer_num_workers, max_async_rollout (0..2, and the run's own) and
// max_concurrent_prompts_per_server. prompts_batch_size_for_trainer and number_of_minibatches change
// the optimisation itself, so they are predicted only when asked (`--set`). Processes are bounded
// by the cluster: at most one per device; on CPU nodes at most twice the cores in all.
// The recommendation is the fastest candidate, unless it gains less than kMinGain over the run's
// own settings (then: keep them); among candidates within 2% of each other the one with fewer
// processes, then less asynchrony, then fewer changed keys wins.
#pragma once

#include <string>
#include <vector>

#include "orchestrator/tune/loop_sim.h"

namespace rlrun::orchestrator::tune {

inline constexpr double kMinGain = 1.05;  // a recommendation must be predicted at least 5% faster

struct Candidate {
  LoopSettings settings;
  Prediction prediction;
};

struct Advice {
  Candidate current;                   // the run's settings (or the --set ones)
  std::vector<Candidate> candidates;   // feasible, fastest first
  Candidate recommended;               // == current when nothing gains kMinGain
  bool change = false;                 // recommended differs from current
};

Advice advise(const LoopCosts& costs, const LoopSettings& current, const Cluster& cluster, const SimOptions& options);

// "inference_num_workers: 1 -> 2, max_async_rollout: 1 -> 2" (the keys that differ), or "" when none.
std::string describe_change(const LoopSettings& from, const LoopSettings& to);

}  // namespace rlrun::orchestrator::tune
