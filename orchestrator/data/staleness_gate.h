// staleness_gate.h - how far rollout may run ahead of the trainer (design step 5).
//
// Versions: the trainer's weights are version S after S completed (and synced) steps; a rollout
// worker samples with the last version it loaded. Step S + 1 trains on policy version S.
//
//   async_level = inference_step - trainer_step - 1, where inference_step is the (1-based) batch
//   the next dispatched group would fill: groups outstanding (in flight, finished and waiting, or
//   in the batch being trained) fill batches of batch_groups each, so
//   async_level = floor(outstanding / batch_groups).
// Dispatch is allowed while async_level <= max_async_rollout (0 = synchronous: the next batch is
// generated only after the previous one was trained and its weights synced).
// A finished sample whose tokens came from version v is too stale for the step trained on policy
// version S when S - v > max_async_rollout (discarded, reason "stale"): with dispatch gated as
// above this only happens to groups that waited longer than the gate intends.
// An in-flight request dispatched at trainer version d is cancelled once S - d >
// max_off_policy_steps (-1 = never).
#pragma once

#include <cstdint>

namespace rlrun::orchestrator {

struct GateOptions {
  int64_t max_async_rollout = 1;
  int64_t max_off_policy_steps = -1;
  int64_t batch_groups = 1;  // prompts_batch_size_for_trainer (>= 1)
};

class StalenessGate {
 public:
  explicit StalenessGate(GateOptions options) : options_(options) {}

  // outstanding_groups: dispatched groups not yet trained nor dropped. The async level of the
  // next group dispatched (what the gate judges) ...
  int64_t async_level(int64_t outstanding_groups) const { return outstanding_groups / options_.batch_groups; }
  // ... and of the newest group already out (what the async_level gauge shows; 0 with none out).
  int64_t current_async_level(int64_t outstanding_groups) const {
    return outstanding_groups <= 0 ? 0 : (outstanding_groups - 1) / options_.batch_groups;
  }
  bool may_dispatch(int64_t outstanding_groups) const {
    return async_level(outstanding_groups) <= options_.max_async_rollout;
  }
  // Staleness of a sample sampled with `sample_version`, trained on policy version trainer_step.
  static int64_t staleness(uint64_t sample_version, int64_t trainer_step) {
    return trainer_step - static_cast<int64_t>(sample_version);
  }
  bool too_stale(uint64_t sample_version, int64_t trainer_step) const {
    return staleness(sample_version, trainer_step) > options_.max_async_rollout;
  }
  bool should_cancel(uint64_t dispatch_version, int64_t trainer_step) const {
    return options_.max_off_policy_steps >= 0 &&
           trainer_step - static_cast<int64_t>(dispatch_version) > options_.max_off_policy_steps;
  }
  const GateOptions& options() const { return options_; }

 private:
  GateOptions options_;
};

}  // namespace rlrun::orchestrator
