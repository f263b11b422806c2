// run/training/trainer_recovery.cc - a trainer rank that dies or hangs restarts the whole trainer group
// from the newest checkpoint, while the rollout workers keep generating.
//
// Found failed: a rank's process exits (supervise.cc; its data-parallel peers then fail in their
// collectives and are restarted with it), or a train step, weight send or checkpoint save is not
// answered within train_step_timeout_seconds (the first rank that did not answer is named).
// Every rank restarts, since a gradient group with one new member cannot go on: the survivors are
// killed, and after trainer_restart_backoff_seconds * 2^(restarts - 1) (at most
// restart_backoff_max_seconds) every rank starts again
// (run/workers/supervisor.h: trainer_restart_spec) loading the newest checkpoint this run saved or resumed
// from, or, before the first one, the start weights (model.checkpoint or the initialisation),
// then the format warm-start's batches again: the same version 0. After max_trainer_restarts
// restarts the next failure stops the run, naming the rank's log.
//
// The step counter goes back to the checkpoint's step, and so do the weights: the next weight
// sync (a new epoch of the weight group) gives every rollout worker the checkpoint's version.
// Then the steps after it are trained again from their kept batches (run/training/step_replay.h), in
// order, before any new batch: the same prompts, samples and advantages, so the run continues as
// it would have (on the CPU, exactly). Samples: those of a redone step that had completed were
// counted trained then and are not counted again; those of the step in training when the trainer
// failed are counted when its redo completes; samples in flight or waiting for a batch stay where
// they are and fill the steps after the redone ones, or are discarded `stale` when the redone
// steps carried the trainer past max_async_rollout from their weights. None is lost.
// metrics.jsonl shows it: the step numbers go back, the lines of redone steps carry
// "redone": true, and every line after a restart "trainer_restarts": N.
// The kept batches are bounded (trainer_replay_max_steps): when those after the checkpoint were
// not all kept (checkpoint_every 0 or larger than the bound) the steps since it cannot be trained
// again; the group restarts from the checkpoint (or the start weights) all the same, the log and
// summary.json (steps_lost) say how many steps were lost, and new batches follow. Their samples
// were counted trained once; those of the step in training are counted discarded.
#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

namespace {

// A killed process's exit comes within moments; past this something else is wrong.
constexpr double kExitWaitSeconds = 60;
// Replacements build their models (and load the checkpoint) before registering.
constexpr double kRestartRegistrationSeconds = 300;

}  // namespace

Status Orchestrator::note_trainer_failure(const WorkerSlot& w, const std::string& why) {
  if (!trainer_failure_) {
    trainer_failure_ = PendingTrainerFailure{w.name, why, unix_now()};
    log::warn(str(w.name, " ", why, "; its log: ", w.log_path));
  }
  return trainer_failure_status();
}

Status Orchestrator::trainer_failure_status() const {
  std::string log_path;
  for (const WorkerSlot& w : workers_)
    if (w.name == trainer_failure_->worker) log_path = w.log_path;
  return unavailable(str(trainer_failure_->worker, " ", trainer_failure_->reason, "; see its log: ", log_path));
}

Status Orchestrator::check_train_timeout(const std::string& what, Clock::time_point started,
                                         const std::function<bool(int rank)>& answered) {
  if (seconds_since(started) <= config_.train_step_timeout_seconds) return Status();
  const WorkerSlot* first = nullptr;
  std::string others;
  for (const WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer || answered(w.rank)) continue;
    if (first == nullptr) first = &w;
    else others += str(others.empty() ? "" : ", ", w.name);
  }
  if (first == nullptr) return Status();
  return note_trainer_failure(*first, str("did not finish ", what, " within ", config_.train_step_timeout_seconds,
                                          " s (train_step_timeout_seconds): hung or too slow",
                                          others.empty() ? "" : str(" (nor did ", others, ")")));
}

Status Orchestrator::recovering(const std::function<Status()>& op) {
  while (true) {
    const Status s = op();
    if (s.ok() || !trainer_failure_) return s;
    RLRUN_RETURN_IF_ERROR(recover_trainers());
  }
}

Status Orchestrator::recover_trainers() {
  committing_ = false;  // an interrupt stops a restart at once
  trainer_waiting_ = false;
  while (trainer_failure_) {
    const PendingTrainerFailure failure = *trainer_failure_;
    trainer_failure_.reset();
    RunOutcome::TrainerFailure& record = outcome_.trainer_failures.emplace_back();
    record.worker = failure.worker;
    record.reason = failure.reason;
    record.step = steps_.completed;
    record.detected_at = failure.detected_at;
    const int64_t max_restarts = config_.max_trainer_restarts;
    if (outcome_.trainer_restarts >= max_restarts) {
      return unavailable(str(failure.worker, " ", failure.reason, "; the trainer group was restarted ",
                             outcome_.trainer_restarts, " time(s), max_trainer_restarts = ", max_restarts,
                             " used up; see its log: ", worker_by_name(failure.worker)->log_path));
    }
    ++outcome_.trainer_restarts;
    metrics_.trainer_restarts->Increment();
    const Status s = restart_trainer_group(record);  // no other failure is recorded meanwhile
    if (!s.ok() && !trainer_failure_) return s;
  }
  return Status();
}

Status Orchestrator::restart_trainer_group(RunOutcome::TrainerFailure& record) {
  ScopedSpan span("trainer_restart", "orchestrator");
  const int restart = static_cast<int>(outcome_.trainer_restarts);
  record.checkpoint = newest_checkpoint_ ? newest_checkpoint_->dir : "";
  record.restored_step = newest_checkpoint_ ? newest_checkpoint_->state.steps_completed : 0;
  const double backoff = restart_backoff(config_.trainer_restart_backoff_seconds, restart, config_.restart_backoff_max_seconds);
  log::warn(str("restarting the trainer group (", restart, "/", config_.max_trainer_restarts, ") in ", backoff,
                " s from ",
                record.checkpoint.empty()
                    ? "the start weights (no checkpoint yet: model.checkpoint or the initialisation, then the format "
                      "warm-start's batches again)"
                    : str(record.checkpoint, " (step ", record.restored_step, ")"),
                "; the steps after it are trained again from their kept batches; the rollout workers keep generating"));

  // The survivors hold a gradient group with a dead member, or are hung: every rank goes.
  for (WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer || w.state == WorkerState::kDead) continue;
    const Status killed = launcher_.kill(w.name);
    w.awaiting_exit = killed.ok();  // not found: it exited meanwhile, and poll_exits will say so
    w.state = WorkerState::kDead;
    w.registered = false;
  }
  // The weight group loses its sender: a round in flight fails (its receivers see the sockets
  // close), the next round re-forms the group, and none starts before the restored weights' own.
  if (std::optional<uint32_t> epoch = sync_.member_died(weight_sender()))
    rendezvous_.abandon(server_, weight_group_key_prefix(static_cast<int>(*epoch)));
  sync_.forget_target();
  restoring_trainers_ = true;

  const auto killed_at = Clock::now();
  const auto trainers_gone = [&] {
    for (const WorkerSlot& w : workers_)
      if (w.role == Role::kTrainer && w.awaiting_exit) return false;
    return true;
  };
  while (!trainers_gone() || seconds_since(killed_at) < backoff) {
    if (seconds_since(killed_at) > backoff + kExitWaitSeconds)
      return unavailable(str("the trainer ranks did not exit within ", kExitWaitSeconds, " s of their SIGKILL"));
    RLRUN_RETURN_IF_ERROR(tick(kTick, looping_));
  }

  for (WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer) continue;
    if (Status s = launcher_.start(trainer_restart_spec(w.spec, record.checkpoint, restart)); !s.ok())
      return unavailable(str("could not restart ", w.name, ": ", s.message(), "; see its log: ", w.log_path));
    w.state = WorkerState::kStarting;
    w.restarts = restart;
    w.started_at = Clock::now();
  }
  record.restart_started_at = unix_now();
  const auto started = Clock::now();
  while (true) {
    const WorkerSlot* waiting = nullptr;
    for (const WorkerSlot& w : workers_)
      if (w.role == Role::kTrainer && !w.registered && waiting == nullptr) waiting = &w;
    if (waiting == nullptr) break;
    if (seconds_since(started) > kRestartRegistrationSeconds)
      return note_trainer_failure(*waiting, str("did not register within ", kRestartRegistrationSeconds,
                                                " s of its restart"));
    RLRUN_RETURN_IF_ERROR(tick(kTick, looping_));
  }

  // Before the first checkpoint: version 0 is the start weights plus the format warm-start.
  if (record.checkpoint.empty()) {
    const std::vector<BatchBuild>& warm = replay_.warm_start();
    if (!warm.empty())
      log::info(str("no checkpoint yet: the format warm-start's ", warm.size(),
                    " step(s) are trained again to rebuild version 0"));
    for (size_t i = 0; i < warm.size(); ++i)
      RLRUN_RETURN_IF_ERROR(train(warm[i], str("format warm-start step ", i + 1, " (redone)"), looping_));
  }

  // The step counter and what the summary counts per step go back to the checkpoint's.
  const int64_t from = record.restored_step, reached = steps_.completed;
  steps_.completed = from;
  steps_.tokens_trained = newest_checkpoint_ ? newest_checkpoint_->state.tokens_trained : 0;
  steps_.reward_means =
      newest_checkpoint_ ? newest_checkpoint_->state.step_reward_means : std::vector<double>{};
  last_step_state_ = newest_checkpoint_ ? std::optional<ResumeState>(newest_checkpoint_->state) : std::nullopt;
  metrics_.trainer_step->Set(static_cast<double>(from));
  if (replay_.dropped_through() > from) {
    // The batches since the checkpoint were not all kept: those steps cannot be trained again.
    record.steps_lost = reached - from;
    log::warn(str("the batches of steps ", from + 1, " to ", replay_.dropped_through(),
                  " were not kept (trainer_replay_max_steps = ", config_.trainer_replay_max_steps, ", ",
                  record.checkpoint.empty() ? "no checkpoint yet" : str("newest checkpoint of step ", from),
                  "): the trainer group goes on from ", record.checkpoint.empty() ? "the start weights" : "that checkpoint",
                  " with new batches from step ", from + 1, "; the ", record.steps_lost,
                  " step(s) trained since are lost (set checkpoint_every to keep them)"));
    for (uint64_t id : replay_.forget_all()) ledger_.discarded(id, "step_not_completed");
  } else {
    record.steps_redone = replay_.rewind(from);
  }

  RLRUN_RETURN_IF_ERROR(weight_sync(static_cast<uint64_t>(from)));
  restoring_trainers_ = false;
  record.restart_ready_at = unix_now();
  first_step_record_ = static_cast<int>(&record - outcome_.trainer_failures.data());
  log::info(str("trainer group restarted: every rank and every rollout worker holds the weights of step ", from, " ",
                record.restart_ready_at - record.detected_at, " s after the failure was found; ",
                record.steps_redone, " step(s) to train again"));
  return Status();
}

}  // namespace rlrun::orchestrator
