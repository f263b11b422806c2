// step_replay.h - the batches a restarted trainer group trains again, without I/O: the
// Orchestrator records every step's batch here (run/samples/dispatch.cc) and, after a trainer restart
// from the newest checkpoint (run/training/trainer_recovery.cc), takes the steps to redo from here before
// it forms any new batch.
//
// Rules:
//  - begin() records the step in training (its per-rank batches as sent); completed() moves it to
//    the kept steps and marks its samples counted (the ledger counted them trained once).
//  - checkpointed(s) forgets the kept steps <= s: a checkpoint of step s holds their effect.
//  - rewind(s) after a restart from a checkpoint of step s: every kept step after s, then the step
//    that was in training, then the steps still to redo, in step order, become the steps to redo.
//    take_redo() hands them out one by one; a redone step that completes is kept again (a later
//    failure before the next checkpoint redoes it once more).
//  - At most max_kept completed steps are kept (trainer_replay_max_steps): past that the oldest is
//    dropped before a checkpoint holds it, and a restart from a step before it cannot train the
//    steps after that step again (dropped_through(); the caller then forget_all()s and the run
//    trains new batches from the restored step on, saying that the steps since are lost).
//  - The warm-start's supervised batches (format_warm_start_steps) are kept for the whole run: a
//    restart with no checkpoint yet trains them again to rebuild the start weights (version 0).
// Memory: the packed batches of the steps since the newest checkpoint, at most max_kept of them,
// plus the warm-start's.
// Threads: the orchestrator's loop.
#pragma once

#include <cstdint>
#include <climits>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/data/batcher.h"

namespace rlrun::orchestrator {

// One RL step's batch as the trainer ranks get it, with what the step line and the ledger need.
struct StepRecord {
  int64_t step = 0;                 // the (1-based) step this batch trains
  BatchBuild build;                 // per_rank[r] goes to trainer rank r
  std::vector<uint64_t> group_ids;  // metrics.jsonl: which prompts, in batch order
  std::string prompt_hash;
  std::vector<uint64_t> sample_ids;  // the ledger's ids of the packed samples
  double reward_mean = 0, reward_std = 0, advantage_abs_mean = 0;
  bool counted = false;  // its step completed once: its samples are counted trained
  bool redone = false;   // trained again after a trainer restart
};

class StepReplay {
 public:
  explicit StepReplay(int64_t max_kept = INT64_MAX) : max_kept_(max_kept < 1 ? 1 : max_kept) {}

  // The step now in training; replaces an earlier one that never completed (RLRUN_CHECK: none).
  void begin(StepRecord record);
  const StepRecord* in_progress() const { return in_progress_ ? &*in_progress_ : nullptr; }
  // The step in progress completed: returns it, kept (the reference lives until checkpointed()).
  const StepRecord& completed();
  void checkpointed(int64_t step);

  // A restart from a checkpoint of `from_step` (0: the start weights): returns how many steps are
  // to be trained again. RLRUN_CHECK: the steps after from_step are all known.
  int64_t rewind(int64_t from_step);
  std::optional<StepRecord> take_redo();
  bool redoing() const { return !redo_.empty(); }
  // The newest step dropped (max_kept) that no checkpoint holds yet; 0: none. rewind(s) needs s >= it.
  int64_t dropped_through() const { return dropped_through_; }
  // For a restart that cannot redo (from before dropped_through()): forgets every step and returns
  // the samples of those never counted trained (the ledger counts them discarded).
  std::vector<uint64_t> forget_all();

  // Groups in batches taken for training whose samples are not counted trained yet (the
  // staleness gate counts them outstanding).
  int64_t groups_untrained() const;
  // Every sample of a batch taken for training but never trained (the run stops): the ledger
  // counts them discarded, step_not_completed.
  std::vector<uint64_t> samples_untrained() const;
  // Samples of steps still to redo that are counted trained already (they completed before the
  // restart): a checkpoint of an earlier step does not hold them.
  int64_t samples_counted_ahead() const;

  void add_warm_start(BatchBuild build) { warm_start_.push_back(std::move(build)); }
  const std::vector<BatchBuild>& warm_start() const { return warm_start_; }
  size_t kept() const { return kept_.size(); }

 private:
  int64_t max_kept_;
  int64_t dropped_through_ = 0;
  std::deque<StepRecord> kept_;  // completed since the newest checkpoint, oldest first
  std::optional<StepRecord> in_progress_;
  std::deque<StepRecord> redo_;  // to train again, oldest first
  std::vector<BatchBuild> warm_start_;
};

}  // namespace rlrun::orchestrator
