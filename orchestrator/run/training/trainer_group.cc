#include "orchestrator/run/training/trainer_group.h"

#include "common/observe/log.h"
#include "orchestrator/run/workers/supervisor.h"

namespace rlrun::orchestrator {

TrainerGroup::TrainerGroup(const Config& config, std::vector<WorkerSlot>& workers, Launcher& launcher,
                           RunMetrics& metrics, LoopPort port, Hooks hooks)
    : config_(config), workers_(workers), launcher_(launcher), metrics_(metrics), port_(std::move(port)),
      hooks_(std::move(hooks)) {}

const WorkerSlot* TrainerGroup::by_name(const std::string& name) const {
  for (const WorkerSlot& w : workers_)
    if (w.name == name) return &w;
  return nullptr;
}

Status TrainerGroup::train(const BatchBuild& build, const std::string& what, bool dispatch) {
  results_.clear();
  error_.clear();
  lost_group_.clear();
  const auto started = port_.now();
  for (const TrainBatch& b : build.per_rank) RLRUN_RETURN_IF_ERROR(port_.send_to(worker_name(Role::kTrainer, b.rank), b));
  const auto answered = [&](int rank) { return results_.count(rank) > 0; };
  return port_.wait(
      [&]() -> Result<bool> {
        if (results_.size() >= build.per_rank.size()) return true;
        if (!error_.empty()) {
          const Status failed = internal_error(str(what, " failed: ", error_));
          if (lost_group_.empty()) return failed;
          // A collective failed: the peer's death, if it shows within the grace, is the failure;
          // else (a stopped peer, a broken link) this rank's, and the group restarts all the same.
          if (Status dead = hooks_.find_dead_peer(failed); pending_) return dead;
          return note_failure(*by_name(lost_group_), str("lost its data-parallel group in ", what, ": ", error_));
        }
        RLRUN_RETURN_IF_ERROR(check_timeout(what, started, answered));
        return false;
      },
      dispatch);
}

void TrainerGroup::on_result(const TrainResult& result) { results_[static_cast<int>(result.rank)] = result; }

void TrainerGroup::on_error(const std::string& peer, const ErrorReply& error) {
  error_ = str(peer, ": ", error.message);
  if (error.code == StatusCode::kUnavailable || error.code == StatusCode::kTimeout) lost_group_ = peer;
}

const std::map<std::string, double>& TrainerGroup::rank0_metrics() const {
  static const std::map<std::string, double> kNone;
  const auto it = results_.find(0);
  return it != results_.end() ? it->second.metrics : kNone;
}

Status TrainerGroup::note_failure(const WorkerSlot& w, const std::string& why) {
  if (!pending_) {
    pending_ = Pending{w.name, why, port_.unix_now()};
    log::warn(str(w.name, " ", why, "; its log: ", w.log_path));
  }
  return failure();
}

Status TrainerGroup::failure() const {
  const WorkerSlot* w = by_name(pending_->worker);
  return unavailable(str(pending_->worker, " ", pending_->reason, "; see its log: ", w != nullptr ? w->log_path : ""));
}

Status TrainerGroup::check_timeout(const std::string& what, Clock::time_point started,
                                   const std::function<bool(int rank)>& answered) {
  if (port_.seconds_since(started) <= config_.train_step_timeout_seconds) return Status();
  const WorkerSlot* first = nullptr;
  std::string others;
  for (const WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer || answered(w.rank)) continue;
    if (first == nullptr) first = &w;
    else others += str(others.empty() ? "" : ", ", w.name);
  }
  if (first == nullptr) return Status();
  return note_failure(*first, str("did not finish ", what, " within ", config_.train_step_timeout_seconds,
                                  " s (train_step_timeout_seconds): hung or too slow",
                                  others.empty() ? "" : str(" (nor did ", others, ")")));
}

Result<TrainerGroup::Restart> TrainerGroup::begin_restart(const std::string& checkpoint, int64_t restored_step,
                                                          int64_t steps_completed) {
  const Pending failure = *pending_;
  pending_.reset();
  Stats::Failure& record = stats_.failures.emplace_back();
  record.worker = failure.worker;
  record.reason = failure.reason;
  record.step = steps_completed;
  record.detected_at = failure.detected_at;
  const int64_t max_restarts = config_.max_trainer_restarts;
  if (stats_.restarts >= max_restarts) {
    const WorkerSlot* w = by_name(failure.worker);
    return unavailable(str(failure.worker, " ", failure.reason, "; the trainer group was restarted ", stats_.restarts,
                           " time(s), max_trainer_restarts = ", max_restarts, " used up; see its log: ",
                           w != nullptr ? w->log_path : ""));
  }
  ++stats_.restarts;
  metrics_.trainer_restarts->Increment();
  Restart restart;
  restart.number = static_cast<int>(stats_.restarts);
  restart.checkpoint = record.checkpoint = checkpoint;
  restart.restored_step = record.restored_step = restored_step;
  restart.backoff_seconds = restart_backoff(config_.trainer_restart_backoff_seconds, restart.number,
                                            config_.restart_backoff_max_seconds);
  restart.record = stats_.failures.size() - 1;
  log::warn(str("restarting the trainer group (", restart.number, "/", config_.max_trainer_restarts, ") in ",
                restart.backoff_seconds, " s from ",
                checkpoint.empty()
                    ? "the start weights (no checkpoint yet: model.checkpoint or the initialisation, then the format "
                      "warm-start's batches again)"
                    : str(checkpoint, " (step ", restored_step, ")"),
                "; the steps after it are trained again from their kept batches; the rollout workers keep generating"));
  // The survivors hold a gradient group with a dead member, or are hung: every rank goes.
  for (WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer || w.state == WorkerState::kDead) continue;
    const Status killed = launcher_.kill(w.name);
    w.awaiting_exit = killed.ok();  // not found: it exited meanwhile, and poll_exits will say so
    w.state = WorkerState::kDead;
    w.registered = false;
  }
  return restart;
}

Status TrainerGroup::relaunch(const Restart& restart, bool dispatch) {
  const auto killed_at = port_.now();
  RLRUN_RETURN_IF_ERROR(port_.wait(
      [&]() -> Result<bool> {
        bool gone = true;
        for (const WorkerSlot& w : workers_) gone = gone && !(w.role == Role::kTrainer && w.awaiting_exit);
        const double since = port_.seconds_since(killed_at);
        if (gone && since >= restart.backoff_seconds) return true;
        if (since > restart.backoff_seconds + kExitWaitSeconds)
          return unavailable(str("the trainer ranks did not exit within ", kExitWaitSeconds, " s of their SIGKILL"));
        return false;
      },
      dispatch));
  for (WorkerSlot& w : workers_) {
    if (w.role != Role::kTrainer) continue;
    if (Status s = launcher_.start(trainer_restart_spec(w.spec, restart.checkpoint, restart.number)); !s.ok())
      return unavailable(str("could not restart ", w.name, ": ", s.message(), "; see its log: ", w.log_path));
    w.state = WorkerState::kStarting;
    w.restarts = restart.number;
    w.started_at = port_.now();
  }
  stats_.failures[restart.record].restart_started_at = port_.unix_now();
  const auto started = port_.now();
  return port_.wait(
      [&]() -> Result<bool> {
        const WorkerSlot* waiting = nullptr;
        for (const WorkerSlot& w : workers_)
          if (w.role == Role::kTrainer && !w.registered && waiting == nullptr) waiting = &w;
        if (waiting == nullptr) return true;
        if (port_.seconds_since(started) > kRestartRegistrationSeconds)
          return note_failure(*waiting, str("did not register within ", kRestartRegistrationSeconds, " s of its restart"));
        return false;
      },
      dispatch);
}

void TrainerGroup::restored(const Restart& restart, int64_t steps_redone, int64_t steps_lost) {
  Stats::Failure& record = stats_.failures[restart.record];
  record.steps_redone = steps_redone;
  record.steps_lost = steps_lost;
  record.restart_ready_at = port_.unix_now();
  first_step_record_ = static_cast<int>(restart.record);
  log::info(str("trainer group restarted: every rank and every rollout worker holds the weights of step ",
                restart.restored_step, " ", record.restart_ready_at - record.detected_at, " s after the failure was found; ",
                steps_redone, " step(s) to train again"));
}

void TrainerGroup::step_completed() {
  if (first_step_record_ < 0) return;
  stats_.failures[first_step_record_].first_step_at = port_.unix_now();
  first_step_record_ = -1;
}

}  // namespace rlrun::orchestrator
