// run/training/checkpoint_keeper.h - the orchestrator's side of checkpoints: when one is saved,
// what it records for a resume (ResumeState, state.h), the newest one a restarted trainer group
// goes back to, and the final model's export.
//
// Rules:
//  - With checkpoint_every N, after every N-th step and the last one, every trainer rank gets
//    SaveCheckpoint with the state captured when that step completed, and the save waits
//    (LoopPort::wait) for CheckpointSaved from each: a save is collective, so a rank that does not
//    answer within train_step_timeout_seconds is hung (TrainerGroup::check_timeout).
//  - A save the trainers answered with an error (disk full, no permission: they removed its
//    partial folder): checkpoint_write_failure: stop returns an error naming the path, the
//    previous checkpoint and what to do; continue records it in the statistics and goes on.
//  - At an interrupt the last completed step is saved, unless it was just saved.
//  - A saved (or resumed-from) checkpoint is the newest: StepReplay forgets the steps it holds,
//    and a trainer restart goes back to it (rewind()).
//  - export_model(): trainer rank 0 writes the weights as an HF folder in <run_dir>/model at the
//    end of the run (also one stopped early); a failure is logged, the run's outcome stands.
// Statistics: the checkpoints not written (the run going on), and the exported model's folder.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/training/state.h"
#include "orchestrator/run/training/step_replay.h"
#include "orchestrator/run/training/trainer_group.h"
#include "orchestrator/run/workers/worker_slot.h"

namespace rlrun::orchestrator {

class CheckpointKeeper {
 public:
  struct Stats {
    // Checkpoints not written, the run going on (checkpoint_write_failure: continue).
    struct Failure {
      int64_t step = 0;
      std::string error;
    };
    std::vector<Failure> failures;
    std::string model_dir;  // <run_dir>/model once trainer rank 0 exported the final weights
  };
  struct Ref {
    std::string dir;  // "" = none yet
    ResumeState state;
  };

  // Everything passed must outlive the keeper; it reads `workers`, never changes them.
  CheckpointKeeper(const Config& config, const std::vector<WorkerSlot>& workers, TrainerGroup& trainers,
                   StepReplay& replay, LoopPort port);

  // Continues the run of the checkpoint in `dir`.
  void resume_from(const ResumeState& state, const std::string& dir);
  const std::optional<ResumeState>& resumed() const { return resumed_; }
  const std::optional<Ref>& newest() const { return newest_; }  // saved by this run, or resumed from

  // A step completed: `state` is what its checkpoint would hold.
  void step_completed(ResumeState state) { last_step_ = std::move(state); }
  // A trainer restart went back to the newest checkpoint: so does the last completed step.
  void rewind();
  Status save_if_due(bool dispatch);   // after a step
  Status save_at_interrupt(bool dispatch);  // the last completed step, unless it was just saved
  void export_model(uint64_t version);

  void on_saved(int rank, const CheckpointSaved& saved) { saved_[rank] = saved; }
  void on_error(int rank, const std::string& peer, const ErrorReply& error);  // to a SaveCheckpoint
  const Stats& stats() const { return stats_; }

 private:
  Status save(const ResumeState& state, bool dispatch);
  Status failed(int64_t step, const std::string& error);

  const Config& config_;
  const std::vector<WorkerSlot>& workers_;
  TrainerGroup& trainers_;
  StepReplay& replay_;
  LoopPort port_;
  std::optional<ResumeState> resumed_;    // the state this run continues from
  std::optional<ResumeState> last_step_;  // captured when the last step completed
  int64_t last_saved_step_ = 0;
  std::optional<Ref> newest_;
  std::map<int, CheckpointSaved> saved_;  // by rank
  Stats stats_;
};

}  // namespace rlrun::orchestrator
