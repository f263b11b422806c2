#include "orchestrator/run/training/checkpoint_keeper.h"

#include <algorithm>

#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_files.h"

namespace rlrun::orchestrator {

CheckpointKeeper::CheckpointKeeper(const Config& config, const std::vector<WorkerSlot>& workers,
                                   TrainerGroup& trainers, StepReplay& replay, LoopPort port)
    : config_(config), workers_(workers), trainers_(trainers), replay_(replay), port_(std::move(port)) {}

void CheckpointKeeper::resume_from(const ResumeState& state, const std::string& dir) {
  resumed_ = state;
  newest_ = Ref{dir, state};
  last_step_ = state;
  last_saved_step_ = state.steps_completed;
}

void CheckpointKeeper::rewind() {
  last_step_ = newest_ ? std::optional<ResumeState>(newest_->state) : std::nullopt;
}

void CheckpointKeeper::on_error(int rank, const std::string& peer, const ErrorReply& error) {
  saved_[rank] = CheckpointSaved{0, false, str(peer, ": ", error.message), "", 0};
}

Status CheckpointKeeper::save(const ResumeState& state, bool dispatch) {
  ScopedSpan span("checkpoint", "orchestrator");
  span.arg("step", state.steps_completed);
  const auto start = port_.now();
  const std::string text = resume_state_json(state);
  SaveCheckpoint request;
  request.step = static_cast<uint64_t>(state.steps_completed);
  request.orchestrator_state = std::vector<uint8_t>(text.begin(), text.end());
  saved_.clear();
  size_t ranks = 0;
  for (const WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer) continue;
    RLRUN_RETURN_IF_ERROR(port_.send_to(w.name, request));
    ++ranks;
  }
  // A save is collective over the trainer ranks: wait for every one.
  const auto answered = [&](int rank) { return saved_.count(rank) > 0; };
  RLRUN_RETURN_IF_ERROR(port_.wait(
      [&]() -> Result<bool> {
        if (saved_.size() >= ranks) return true;
        RLRUN_RETURN_IF_ERROR(
            trainers_.check_timeout(str("the checkpoint of step ", state.steps_completed), start, answered));
        return false;
      },
      dispatch));
  double trainer_seconds = 0;
  std::string dir;
  for (const auto& [rank, saved] : saved_) {
    if (!saved.ok) return failed(state.steps_completed, saved.error);
    if (saved.step != request.step)
      return internal_error(str("trainer ", rank, " saved step ", saved.step, " when asked for ", request.step));
    trainer_seconds = std::max(trainer_seconds, saved.seconds);
    if (rank == 0) dir = saved.dir;
  }
  last_saved_step_ = state.steps_completed;
  newest_ = Ref{dir, state};
  replay_.checkpointed(state.steps_completed);
  log::info(str("checkpoint ", dir, " saved in ", trainer_seconds, " s (", port_.seconds_since(start),
                " s for the orchestrator)"));
  return Status();
}

Status CheckpointKeeper::failed(int64_t step, const std::string& error) {
  const std::vector<std::string> on_disk = trainer::complete_checkpoints(checkpoint_root(config_.run_dir));
  const std::string previous = on_disk.empty() ? "this run has no earlier checkpoint"
                                               : str("the previous checkpoint ", on_disk.front(), " is intact");
  if (config_.checkpoint_write_failure == CheckpointWriteFailure::kContinue) {
    log::error(str("checkpoint of step ", step, " not written: ", error, "; ", previous,
                   "; the run goes on without it (checkpoint_write_failure: continue)"));
    stats_.failures.push_back({step, error});
    return Status();
  }
  return io_error(str("checkpoint of step ", step, " not written: ", error, "; ", previous, ". Fix that, then ",
                      on_disk.empty() ? "start the run again" : "`rlrun CONFIG --resume` continues from it",
                      "; or set checkpoint_write_failure: continue to train on without the checkpoints that fail"));
}

Status CheckpointKeeper::save_if_due(bool dispatch) {
  const int64_t every = config_.checkpoint_every, step = last_step_->steps_completed;
  if (every <= 0 || (step % every != 0 && step != config_.number_of_steps)) return Status();
  return save(*last_step_, dispatch);
}

Status CheckpointKeeper::save_at_interrupt(bool dispatch) {
  if (config_.checkpoint_every <= 0 || !last_step_) return Status();
  if (last_step_->steps_completed <= last_saved_step_) return Status();  // saved already
  log::info(str("interrupted: saving a checkpoint of step ", last_step_->steps_completed, " before stopping"));
  return save(*last_step_, dispatch);
}

void CheckpointKeeper::export_model(uint64_t version) {
  ScopedSpan span("model_export", "orchestrator");
  const auto start = port_.now();
  SaveCheckpoint request;
  request.step = version;
  request.model_only = true;
  saved_.clear();
  Status waited = port_.send_to(worker_name(Role::kTrainer, 0), request);  // the weights are rank 0's
  if (waited.ok()) waited = port_.wait([&] { return saved_.count(0) > 0; }, false);
  if (waited.ok() && !saved_[0].ok) waited = internal_error(saved_[0].error);
  if (!waited.ok()) {
    log::error(str("the final model was not exported: ", waited.message()));
    return;
  }
  stats_.model_dir = saved_[0].dir;
  log::info(str("model of step ", version, " exported to ", stats_.model_dir, " in ", port_.seconds_since(start),
                " s (an HF folder: transformers, vLLM and `rlrun generate --checkpoint` load it)"));
}

}  // namespace rlrun::orchestrator
