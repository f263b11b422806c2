// run/training/checkpoint.cc - the orchestrator's side of checkpoints: when to save, what it records for a
// resume (run/training/state.h), and continuing from it.
#include <algorithm>
#include <tuple>

#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/run/orchestrator.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_files.h"

namespace rlrun::orchestrator {

void Orchestrator::resume_from(const ResumeState& s, const std::string& dir) {
  resumed_ = s;
  rewards_.set_resumed();
  newest_checkpoint_ = CheckpointRef{dir, s};
  last_step_state_ = s;
  last_checkpoint_step_ = s.steps_completed;
  steps_.completed = s.steps_completed;
  dispatcher_.restore_next_ids(s.next_group, s.next_request);
  // The prompt stream from the same seed, advanced past what the saved run drew.
  admission_.resume_from(s.task_draws, s.prompts_skipped);
  steps_.tokens_generated = s.tokens_generated;
  steps_.tokens_trained = s.tokens_trained;
  steps_.reward_means = s.step_reward_means;
  evaluator_.set_before(s.accuracy_before);
  outcome_.trainer_idle_seconds = s.trainer_idle_seconds;
  for (WorkerSlot& w : workers_) {
    auto it = s.rollout_idle_seconds.find(w.name);
    if (it != s.rollout_idle_seconds.end()) w.idle_seconds = it->second;
  }
  metrics_.trainer_step->Set(static_cast<double>(s.steps_completed));
}

ResumeState Orchestrator::capture_state() const {
  ResumeState s;
  s.steps_completed = steps_.completed;
  s.task_draws = admission_.consumed();
  std::tie(s.next_group, s.next_request) = dispatcher_.next_ids();
  s.prompts_skipped = admission_.stats().prompts_skipped;
  s.tokens_generated = steps_.tokens_generated;
  s.tokens_trained = steps_.tokens_trained;
  s.step_reward_means = steps_.reward_means;
  s.accuracy_before = evaluator_.stats().accuracy_before;
  s.loop_seconds = loop_seconds();
  s.trainer_idle_seconds = outcome_.trainer_idle_seconds;
  for (const WorkerSlot& w : workers_)
    if (w.role == Role::kRollout) s.rollout_idle_seconds[w.name] = w.idle_seconds;
  SampleLedger::Summary now = ledger_.summary();
  // Generated and waiting for a batch (max_async_rollout > 0): a resumed run never trains these.
  if (now.lost > 0) now.discarded["unused_at_resume"] += now.lost;
  // Redoing steps after a trainer restart: the samples of the later kept steps are counted trained
  // already, but this state is of an earlier step. A run resumed from it trains those steps with
  // other samples, and counts these as cancelled (samples_at_resume).
  const int64_t ahead = replay_.samples_counted_ahead();
  now.trained -= ahead;
  now.generated -= ahead;
  s.samples = resumed_ ? add_samples(resumed_->samples, now) : now;
  return s;
}

Status Orchestrator::save_checkpoint(const ResumeState& state) {
  ScopedSpan span("checkpoint", "orchestrator");
  span.arg("step", state.steps_completed);
  const auto start = Clock::now();
  const std::string text = resume_state_json(state);
  SaveCheckpoint request;
  request.step = static_cast<uint64_t>(state.steps_completed);
  request.orchestrator_state = std::vector<uint8_t>(text.begin(), text.end());
  checkpoints_saved_.clear();
  size_t ranks = 0;
  for (const WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer) continue;
    RLRUN_RETURN_IF_ERROR(server_.send(w.name, request));
    ++ranks;
  }
  // A save is collective over the trainer ranks: wait for every one (an interrupt waits too).
  const bool was_committing = committing_;
  committing_ = true;
  Status waited;
  const auto answered = [&](int rank) { return checkpoints_saved_.count(rank) > 0; };
  while (waited.ok() && checkpoints_saved_.size() < ranks) {
    waited = check_train_timeout(str("the checkpoint of step ", state.steps_completed), start, answered);
    if (waited.ok()) waited = tick(kTick, looping_ && !stopped_by_interrupt_);
  }
  committing_ = was_committing;
  RLRUN_RETURN_IF_ERROR(waited);
  double trainer_seconds = 0;
  std::string dir;
  for (const auto& [rank, saved] : checkpoints_saved_) {
    if (!saved.ok) return checkpoint_failed(state.steps_completed, saved.error);
    if (saved.step != request.step)
      return internal_error(str("trainer ", rank, " saved step ", saved.step, " when asked for ", request.step));
    trainer_seconds = std::max(trainer_seconds, saved.seconds);
    if (rank == 0) dir = saved.dir;
  }
  last_checkpoint_step_ = state.steps_completed;
  newest_checkpoint_ = CheckpointRef{dir, state};
  replay_.checkpointed(state.steps_completed);
  log::info(str("checkpoint ", dir, " saved in ", trainer_seconds, " s (", seconds_since(start),
                " s for the orchestrator)"));
  return Status();
}

Status Orchestrator::checkpoint_failed(int64_t step, const std::string& error) {
  const std::vector<std::string> on_disk = trainer::complete_checkpoints(checkpoint_root(config_.run_dir));
  const std::string previous = on_disk.empty() ? "this run has no earlier checkpoint"
                                               : str("the previous checkpoint ", on_disk.front(), " is intact");
  if (config_.checkpoint_write_failure == CheckpointWriteFailure::kContinue) {
    log::error(str("checkpoint of step ", step, " not written: ", error, "; ", previous,
                   "; the run goes on without it (checkpoint_write_failure: continue)"));
    outcome_.checkpoint_failures.push_back({step, error});
    return Status();
  }
  return io_error(str("checkpoint of step ", step, " not written: ", error, "; ", previous, ". Fix that, then ",
                      on_disk.empty() ? "start the run again" : "`rlrun CONFIG --resume` continues from it",
                      "; or set checkpoint_write_failure: continue to train on without the checkpoints that fail"));
}

Status Orchestrator::checkpoint_if_due() {
  const int64_t every = config_.checkpoint_every, step = steps_.completed;
  if (every <= 0 || (step % every != 0 && step != config_.number_of_steps)) return Status();
  return save_checkpoint(*last_step_state_);
}

Status Orchestrator::checkpoint_on_interrupt() {
  if (config_.checkpoint_every <= 0 || !last_step_state_) return Status();
  if (last_step_state_->steps_completed <= last_checkpoint_step_) return Status();  // saved already
  log::info(str("interrupted: saving a checkpoint of step ", last_step_state_->steps_completed, " before stopping"));
  return save_checkpoint(*last_step_state_);
}

void Orchestrator::export_final_model() {
  ScopedSpan span("model_export", "orchestrator");
  const auto start = Clock::now();
  SaveCheckpoint request;
  request.step = steps_.version();
  request.model_only = true;
  checkpoints_saved_.clear();
  Status waited = server_.send(weight_sender(), request);  // trainer rank 0
  const bool was_committing = committing_;
  committing_ = true;  // a first interrupt waits for it; a second one stops it
  while (waited.ok() && checkpoints_saved_.count(0) == 0) waited = tick(kTick, false);
  committing_ = was_committing;
  if (waited.ok() && !checkpoints_saved_[0].ok) waited = internal_error(checkpoints_saved_[0].error);
  if (!waited.ok()) {
    log::error(str("the final model was not exported: ", waited.message()));
    return;
  }
  outcome_.model_dir = checkpoints_saved_[0].dir;
  log::info(str("model of step ", steps_.completed, " exported to ", outcome_.model_dir, " in ", seconds_since(start),
                " s (an HF folder: transformers, vLLM and `rlrun generate --checkpoint` load it)"));
}

Orchestrator::BatchIdentity Orchestrator::batch_identity(const std::vector<Group>& batch) {
  BatchIdentity identity;
  trainer::Checksum hash;
  for (const Group& g : batch) {
    identity.group_ids.push_back(g.id);
    hash.update(g.problem.prompt.data(), g.problem.prompt.size() + 1);  // with the NUL: prompts stay apart
  }
  identity.prompt_hash = trainer::checksum_hex(hash.value());
  return identity;
}

}  // namespace rlrun::orchestrator
