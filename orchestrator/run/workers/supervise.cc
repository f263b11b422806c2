// run/workers/supervise.cc - rollout worker failures as the Orchestrator carries them out: the verdicts
// come from WorkerSupervisor (run/workers/supervisor.h), and a request older than
// rollout_request_timeout_seconds fails its worker too (Dispatcher::overdue). A failed worker is
// killed through the Launcher (local and Slurm alike), its unanswered samples go back to the
// Dispatcher to be sent to the others (the same group and sample ids), a weight-sync round it was
// in is abandoned, and its replacement starts after the back-off; it registers, receives the
// current weights in a sync round (run/training/weight_sync.cc) and only then takes requests. A trainer's
// exit is noted here and acted on by run/training/trainer_recovery.cc.
#include "common/clock.h"
#include "common/observe/log.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

Status Orchestrator::supervise() {
  for (const ProcessExit& e : launcher_.poll_exits()) {
    if (accepting_exits_) continue;
    WorkerSlot* w = worker_by_name(e.name);
    if (w == nullptr) continue;
    if (w->state == WorkerState::kDead) {
      w->awaiting_exit = false;  // the kill we sent, or an exit already counted
      continue;
    }
    if (w->role == Role::kTrainer) {  // the other exits of this poll are handled all the same
      (void)note_trainer_failure(*w, e.describe());
      w->state = WorkerState::kDead;
      w->registered = false;
      continue;
    }
    RLRUN_RETURN_IF_ERROR(fail_worker(static_cast<int>(w - workers_.data()), e.describe(), true));
  }
  if (accepting_exits_) return Status();
  if (trainer_failure_ && !evaluator_.running()) return trainer_failure_status();
  for (size_t i = 0; i < workers_.size(); ++i) {
    WorkerSlot& w = workers_[i];
    const WorkerSupervisor::Verdict v = supervisor_.judge(w, inbox_backlogged_, Clock::now());
    if (v.act == WorkerSupervisor::Verdict::Act::kFail && w.role == Role::kTrainer) {
      (void)note_trainer_failure(w, v.why);  // the group restarts (run/training/trainer_recovery.cc)
      if (!evaluator_.running()) return trainer_failure_status();
    } else if (v.act == WorkerSupervisor::Verdict::Act::kFail) {
      RLRUN_RETURN_IF_ERROR(fail_worker(static_cast<int>(i), v.why, false));
    } else if (v.act == WorkerSupervisor::Verdict::Act::kRestart) {
      RLRUN_RETURN_IF_ERROR(restart_worker(static_cast<int>(i)));
    }
  }
  rewards_.release_overdue(config_.rollout_request_timeout_seconds);
  if (inbox_backlogged_) return Status();
  // Blocked in a sync: bounded there.
  const auto syncing = [&](int worker) { return sync_.waits_for(workers_[worker].name); };
  if (std::optional<Dispatcher::Overdue> late = dispatcher_.overdue(config_.rollout_request_timeout_seconds, syncing))
    return fail_worker(late->worker, str("left request ", late->request, " unanswered for ", late->age_seconds,
                                         " s (rollout_request_timeout_seconds = ",
                                         config_.rollout_request_timeout_seconds, ")"),
                       false);
  return Status();
}

Status Orchestrator::fail_worker(int index, const std::string& why, bool exited) {
  WorkerSlot& w = workers_[index];
  if (!exited && w.state != WorkerState::kDead) {
    const Status killed = launcher_.kill(w.name);
    w.awaiting_exit = killed.ok();  // not found: it exited meanwhile, and poll_exits will say so
    if (!killed.ok()) log::debug(str("kill ", w.name, ": ", killed.message()));
  }
  episodes_.requeue_worker(index);  // its episode calls: sent again
  if (const int64_t samples = dispatcher_.requeue_worker(index); samples > 0)
    log::info(str(samples, " sample(s) of ", w.name, " go back to the queue"));
  rewards_.release_worker(index, w.name);
  // A member of a round in flight: the round cannot succeed; unblock the others' join now.
  const bool held = sync_.holding();
  if (std::optional<uint32_t> epoch = sync_.member_died(w.name))
    rendezvous_.abandon(server_, weight_group_key_prefix(static_cast<int>(*epoch)));
  if (held && !sync_.holding())
    log::info(str(w.name, "'s failure explains the failed weight sync: it runs again once the replacement has registered"));
  w.failure_record = static_cast<int>(outcome_.worker_failures.size());
  outcome_.worker_failures.push_back({w.name, why, unix_now(), 0, 0, 0});
  const int max_restarts = supervisor_.policy().max_restarts;
  const std::optional<double> backoff = supervisor_.on_failure(w, Clock::now());
  if (!backoff) {
    return unavailable(str("rollout worker ", w.name, " ", why, "; it was restarted ", w.restarts,
                           " time(s), max_worker_restarts = ", max_restarts, " used up; see its log: ", w.log_path));
  }
  ++outcome_.worker_restarts;
  metrics_.count_worker_restart(w.name);
  log::warn(str(w.name, " ", why, "; restarting (", w.restarts, "/", max_restarts, ") in ", *backoff,
                " s; its log: ", w.log_path));
  return Status();
}

Status Orchestrator::restart_worker(int index) {
  WorkerSlot& w = workers_[index];
  const Status s = launcher_.start(supervisor_.start_replacement(w, Clock::now()));
  if (!s.ok()) return unavailable(str("could not restart ", w.name, ": ", s.message(), "; see its log: ", w.log_path));
  if (w.failure_record >= 0) outcome_.worker_failures[w.failure_record].replacement_started_at = unix_now();
  log::info(str("restarted ", w.name, " (restart ", w.restarts, ")"));
  return Status();
}

}  // namespace rlrun::orchestrator
