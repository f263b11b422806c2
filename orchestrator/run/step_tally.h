// run/step_tally.h - what the run's completed steps add up to: the Orchestrator keeps it (run/step.cc),
// parts read it, a resume and a trainer restart set it back (run/training/state.h).
#pragma once

#include <cstdint>
#include <vector>

namespace rlrun::orchestrator {

struct StepTally {
  // Steps completed and synced: the weight version every rollout worker holds (step s, 1-based,
  // trains on version s - 1). A trainer restart sets it back to its checkpoint's step.
  int64_t completed = 0;
  std::vector<double> reward_means;  // per completed step
  int64_t tokens_generated = 0;      // by every rollout worker, episodes' calls included
  int64_t tokens_trained = 0;
  uint64_t version() const { return static_cast<uint64_t>(completed); }
};

}  // namespace rlrun::orchestrator
