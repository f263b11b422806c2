// run/supervise.cc - rollout worker failures: detection, requeue, restart with back-off.
//
// A rollout worker has failed when its process exits (Launcher::poll_exits), when nothing came
// from it for heartbeat_timeout_seconds outside a weight sync (a stopped or wedged process;
// judged only when the orchestrator has read every message that arrived), or
// when one of its requests is older than rollout_request_timeout_seconds. The orchestrator then
// kills it (through the Launcher, so local and Slurm alike), puts its unanswered samples back to
// be dispatched to the other workers (the same group and sample ids: the ledger sees each id
// dispatched once; results the dead worker sent late name a request that no longer exists and are
// ignored), and starts a replacement after worker_restart_backoff_seconds, doubling with each
// restart of that worker. The replacement registers, receives the current weights in a sync round
// (run/weight_sync.cc) and only then takes requests. After max_worker_restarts restarts of one worker,
// its next failure stops the run naming it and its log. Trainer failures stop the run.
#include <cmath>

#include "common/clock.h"
#include "common/observe/log.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

namespace {

// Workers build their models before registering: generous on a loaded machine.
constexpr double kRegistrationTimeoutSeconds = 300;

// The spec of the replacement: same command, no weight group before registering (it joins the
// epoch its first WeightSyncBegin names), and its incarnation.
ProcessSpec replacement_spec(const ProcessSpec& original, int incarnation) {
  ProcessSpec spec = original;
  std::vector<std::string>& argv = spec.argv;
  bool has_incarnation = false;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--weight-group-epoch") argv[i + 1] = "-1";
    if (argv[i] == "--incarnation") argv[i + 1] = str(incarnation), has_incarnation = true;
  }
  if (!has_incarnation) argv.insert(argv.end(), {"--incarnation", str(incarnation)});
  return spec;
}

}  // namespace

Status Orchestrator::supervise() {
  for (const ProcessExit& e : launcher_.poll_exits()) {
    if (accepting_exits_) continue;
    WorkerSlot* w = worker_by_name(e.name);
    if (w == nullptr) continue;
    if (w->role == Role::kTrainer) {
      worker_died_ = true;
      return unavailable(str("worker ", e.name, " ", e.describe(), " unexpectedly; see its log: ", w->log_path));
    }
    if (w->state == WorkerState::kDead) {
      w->awaiting_exit = false;  // the kill we sent, or an exit already counted
      continue;
    }
    RLRUN_RETURN_IF_ERROR(fail_worker(static_cast<int>(w - workers_.data()), e.describe(), true));
  }
  if (accepting_exits_) return Status();
  const double heartbeat_timeout = config_.heartbeat_timeout_seconds;
  for (size_t i = 0; i < workers_.size(); ++i) {
    WorkerSlot& w = workers_[i];
    if (w.role != Role::kRollout) continue;
    const bool alive = w.state == WorkerState::kNeedsWeights || w.state == WorkerState::kReady;
    const bool syncing = sync_.waits_for(w.name);  // blocked in a collective: bounded there
    if (alive && !syncing && !inbox_backlogged_ && seconds_since(w.last_heard) > heartbeat_timeout) {
      RLRUN_RETURN_IF_ERROR(fail_worker(static_cast<int>(i), str("silent for ", seconds_since(w.last_heard),
                                                                 " s (heartbeat_timeout_seconds = ", heartbeat_timeout, ")"),
                                        false));
    } else if (w.state == WorkerState::kStarting && w.restarts > 0 &&
               seconds_since(w.started_at) > kRegistrationTimeoutSeconds) {
      RLRUN_RETURN_IF_ERROR(fail_worker(static_cast<int>(i), str("did not register within ",
                                                                 kRegistrationTimeoutSeconds, " s"), false));
    } else if (w.state == WorkerState::kDead && !w.awaiting_exit && Clock::now() >= w.restart_at) {
      RLRUN_RETURN_IF_ERROR(restart_worker(static_cast<int>(i)));
    }
  }
  for (const auto& [id, r] : requests_) {
    if (inbox_backlogged_ || seconds_since(r.sent_at) <= config_.rollout_request_timeout_seconds) continue;
    if (sync_.waits_for(workers_[r.worker].name)) continue;  // blocked in a sync: bounded there
    // Ends the loop: fail_worker erases from requests_.
    return fail_worker(r.worker, str("left request ", id, " unanswered for ", seconds_since(r.sent_at),
                                     " s (rollout_request_timeout_seconds = ", config_.rollout_request_timeout_seconds,
                                     ")"),
                       false);
  }
  return Status();
}

Status Orchestrator::fail_worker(int index, const std::string& why, bool exited) {
  WorkerSlot& w = workers_[index];
  if (!exited && w.state != WorkerState::kDead) {
    const Status killed = launcher_.kill(w.name);
    w.awaiting_exit = killed.ok();  // not found: it exited meanwhile, and poll_exits will say so
    if (!killed.ok()) log::debug(str("kill ", w.name, ": ", killed.message()));
  }
  requeue_requests_of(index);
  w.state = WorkerState::kDead;
  w.registered = false;
  // A member of a round in flight: the round cannot succeed; unblock the others' join now.
  if (std::optional<uint32_t> epoch = sync_.member_died(w.name))
    rendezvous_.abandon(server_, weight_group_key_prefix(static_cast<int>(*epoch)));
  w.failure_record = static_cast<int>(outcome_.worker_failures.size());
  outcome_.worker_failures.push_back({w.name, why, unix_now(), 0, 0, 0});
  const int max_restarts = static_cast<int>(config_.max_worker_restarts);
  if (w.restarts >= max_restarts) {
    return unavailable(str("rollout worker ", w.name, " ", why, "; it was restarted ", w.restarts,
                           " time(s), max_worker_restarts = ", max_restarts, " used up; see its log: ", w.log_path));
  }
  ++w.restarts;
  ++outcome_.worker_restarts;
  const double backoff = config_.worker_restart_backoff_seconds * std::pow(2.0, w.restarts - 1);
  w.restart_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(backoff * 1000));
  metrics_.count_worker_restart(w.name);
  log::warn(str(w.name, " ", why, "; restarting (", w.restarts, "/", max_restarts, ") in ", backoff,
                " s; its log: ", w.log_path));
  return Status();
}

void Orchestrator::requeue_requests_of(int index) {
  int64_t samples = 0;
  for (auto it = requests_.begin(); it != requests_.end();) {
    const Request& r = it->second;
    if (r.worker != index) {
      ++it;
      continue;
    }
    if (r.eval) {
      requeued_eval_.push_back(r.group);
      ++samples;
    } else if (auto g = groups_.find(r.group); g != groups_.end()) {
      for (uint32_t i = r.first; i < r.first + r.count; ++i) {
        if (g->second.samples[i].returned) continue;
        requeued_.emplace_back(r.group, i);
        ++samples;
      }
    }
    it = requests_.erase(it);
  }
  workers_[index].lanes_used = 0;
  if (samples > 0) log::info(str(samples, " sample(s) of ", workers_[index].name, " go back to the queue"));
}

Status Orchestrator::restart_worker(int index) {
  WorkerSlot& w = workers_[index];
  const Status s = launcher_.start(replacement_spec(w.spec, w.restarts));
  if (!s.ok()) return unavailable(str("could not restart ", w.name, ": ", s.message(), "; see its log: ", w.log_path));
  w.state = WorkerState::kStarting;
  w.started_at = Clock::now();
  if (w.failure_record >= 0) outcome_.worker_failures[w.failure_record].replacement_started_at = unix_now();
  log::info(str("restarted ", w.name, " (restart ", w.restarts, ")"));
  return Status();
}

void Orchestrator::dispatch_requeued() {
  while (!requeued_.empty()) {
    const int w = free_rollout_worker();
    if (w < 0) return;
    const auto [group, index] = requeued_.front();
    requeued_.pop_front();
    if (groups_.count(group)) send_request(group, index, 1, w);
  }
  while (!requeued_eval_.empty()) {
    const int w = free_rollout_worker();
    if (w < 0) return;
    const uint64_t problem = requeued_eval_.front();
    requeued_eval_.pop_front();
    const Status s = send_eval_request(problem, w);
    if (!s.ok()) log::warn(str("evaluation request to ", workers_[w].name, ": ", s.message()));
  }
}

Status Orchestrator::check_train_timeout(const std::string& what, Clock::time_point started) const {
  if (seconds_since(started) <= config_.train_step_timeout_seconds) return Status();
  std::string logs;
  for (const WorkerSlot& w : workers_)
    if (w.role == Role::kTrainer) logs += str(logs.empty() ? "" : ", ", w.log_path);
  return timeout_error(str(what, " did not finish within ", config_.train_step_timeout_seconds,
                           " s (train_step_timeout_seconds): the trainer is hung or too slow; see ", logs));
}

}  // namespace rlrun::orchestrator
