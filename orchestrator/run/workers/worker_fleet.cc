#include "orchestrator/run/workers/worker_fleet.h"

#include <algorithm>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

WorkerFleet::WorkerFleet(std::vector<WorkerSlot> workers, SupervisionPolicy policy, Launcher& launcher,
                         RunMetrics& metrics, LoopPort port, Hooks hooks)
    : workers_(std::move(workers)), supervisor_(policy), launcher_(launcher), metrics_(metrics),
      port_(std::move(port)), hooks_(std::move(hooks)) {}

WorkerSlot* WorkerFleet::by_name(const std::string& name) {
  for (WorkerSlot& w : workers_)
    if (w.name == name) return &w;
  return nullptr;
}

bool WorkerFleet::all_registered() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const WorkerSlot& w) { return w.registered; });
}

bool WorkerFleet::all_alive() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const WorkerSlot& w) { return w.alive(); });
}

Result<WorkerSlot*> WorkerFleet::on_register(const Incoming& in, const Register& reg) {
  WorkerSlot* w = by_name(in.peer);
  const bool matches = w != nullptr && w->role == reg.role && w->rank == reg.rank;
  if (!matches) {
    log::warn(str("ignoring Register from unexpected peer `", in.peer, "` (", role_name(reg.role), " ", reg.rank, ")"));
    RLRUN_RETURN_IF_ERROR(port_.send(in.peer, Message{in.message.correlation_id,
                                                      ErrorReply{StatusCode::kInvalidArgument,
                                                                 static_cast<uint16_t>(MessageKind::kRegister),
                                                                 "not a worker of this run"}}));
    return static_cast<WorkerSlot*>(nullptr);
  }
  w->registered = true;
  w->last_heard = port_.now();
  if (w->state == WorkerState::kStarting) w->state = WorkerState::kNeedsWeights;
  RegisterAck ack;
  ack.assigned_id = static_cast<uint32_t>(w - workers_.data());
  log::info(str(w->name, " registered (pid ", reg.pid, " on ", reg.host, ")"));
  RLRUN_RETURN_IF_ERROR(port_.send(in.peer, Message{in.message.correlation_id, ack}));
  w->compute_threads = w->spec.cpus;  // a new process: the threads it was started with
  w->kl_reference_seconds = 0;
  return w;
}

bool WorkerFleet::heard(const std::string& peer) {
  WorkerSlot* from = by_name(peer);
  if (from == nullptr) return true;
  if (from->state == WorkerState::kDead) return false;  // sent before it died
  from->last_heard = port_.now();
  return true;
}

void WorkerFleet::on_heartbeat(const Incoming& in, const Heartbeat& hb) {
  (void)port_.send(in.peer, Message{in.message.correlation_id, hb});  // the echo proves we live
  auto mem = metrics_.memory_bytes.find(in.peer);
  if (mem != metrics_.memory_bytes.end()) mem->second->Set(static_cast<double>(hb.memory_bytes));
  auto peak = metrics_.peak_memory_bytes.find(in.peer);
  if (peak != metrics_.peak_memory_bytes.end()) peak->second->Set(static_cast<double>(hb.peak_memory_bytes));
  int64_t& best = stats_.peak_memory_bytes[in.peer];
  best = std::max(best, static_cast<int64_t>(hb.peak_memory_bytes));
  metrics_.observe_rollout(in.peer, hb);  // no-op for trainers
}

void WorkerFleet::on_train_result(const std::string& peer, const TrainResult& result) {
  // The step's resident peaks: sharper than the heartbeats' samples.
  int64_t& best = stats_.peak_memory_bytes[peer];
  for (const char* key : {"memory_forward_backward_rss_peak_bytes", "memory_optimizer_rss_peak_bytes"}) {
    auto it = result.metrics.find(key);
    if (it != result.metrics.end()) best = std::max(best, static_cast<int64_t>(it->second));
  }
  for (const char* phase : {"forward_backward", "optimizer"}) {
    auto it = result.metrics.find(str("memory_", phase, "_backend_peak_bytes"));
    if (it == result.metrics.end()) continue;
    int64_t& phase_best = stats_.phase_peak_bytes[peer][phase];
    phase_best = std::max(phase_best, static_cast<int64_t>(it->second));
  }
}

Status WorkerFleet::take_exits() {
  for (const ProcessExit& e : launcher_.poll_exits()) {
    if (accepting_exits_) continue;
    WorkerSlot* w = by_name(e.name);
    if (w == nullptr) continue;
    if (w->state == WorkerState::kDead) {
      w->awaiting_exit = false;  // the kill we sent, or an exit already counted
      continue;
    }
    if (w->role == Role::kTrainer) {  // the other exits of this poll are handled all the same
      (void)hooks_.trainer_failed(*w, e.describe());
      w->state = WorkerState::kDead;
      w->registered = false;
      continue;
    }
    RLRUN_RETURN_IF_ERROR(fail(static_cast<int>(w - workers_.data()), e.describe(), true));
  }
  return Status();
}

Status WorkerFleet::judge(bool backlogged, bool hold_trainer_failures) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    WorkerSlot& w = workers_[i];
    const WorkerSupervisor::Verdict v = supervisor_.judge(w, backlogged, port_.now());
    if (v.act == WorkerSupervisor::Verdict::Act::kFail && w.role == Role::kTrainer) {
      const Status failed = hooks_.trainer_failed(w, v.why);  // the group restarts (run/training/trainer_group.h)
      if (!hold_trainer_failures) return failed;
    } else if (v.act == WorkerSupervisor::Verdict::Act::kFail) {
      RLRUN_RETURN_IF_ERROR(fail(static_cast<int>(i), v.why, false));
    } else if (v.act == WorkerSupervisor::Verdict::Act::kRestart) {
      RLRUN_RETURN_IF_ERROR(restart(static_cast<int>(i)));
    }
  }
  return Status();
}

Status WorkerFleet::fail(int index, const std::string& why, bool exited) {
  WorkerSlot& w = workers_[index];
  if (!exited && w.state != WorkerState::kDead) {
    const Status killed = launcher_.kill(w.name);
    w.awaiting_exit = killed.ok();  // not found: it exited meanwhile, and poll_exits will say so
    if (!killed.ok()) log::debug(str("kill ", w.name, ": ", killed.message()));
  }
  hooks_.release_work(index);
  w.failure_record = static_cast<int>(stats_.failures.size());
  stats_.failures.push_back({w.name, why, port_.unix_now(), 0, 0, 0});
  const int max_restarts = supervisor_.policy().max_restarts;
  const std::optional<double> backoff = supervisor_.on_failure(w, port_.now());
  if (!backoff) {
    return unavailable(str("rollout worker ", w.name, " ", why, "; it was restarted ", w.restarts,
                           " time(s), max_worker_restarts = ", max_restarts, " used up; see its log: ", w.log_path));
  }
  ++stats_.restarts;
  metrics_.count_worker_restart(w.name);
  log::warn(str(w.name, " ", why, "; restarting (", w.restarts, "/", max_restarts, ") in ", *backoff,
                " s; its log: ", w.log_path));
  return Status();
}

Status WorkerFleet::restart(int index) {
  WorkerSlot& w = workers_[index];
  const Status s = launcher_.start(supervisor_.start_replacement(w, port_.now()));
  if (!s.ok()) return unavailable(str("could not restart ", w.name, ": ", s.message(), "; see its log: ", w.log_path));
  if (w.failure_record >= 0) stats_.failures[w.failure_record].replacement_started_at = port_.unix_now();
  log::info(str("restarted ", w.name, " (restart ", w.restarts, ")"));
  return Status();
}

void WorkerFleet::weights_synced(uint64_t version) {
  for (WorkerSlot& w : workers_) {
    if (w.state != WorkerState::kNeedsWeights) continue;
    w.state = WorkerState::kReady;
    if (w.failure_record >= 0) {
      stats_.failures[w.failure_record].replacement_ready_at = port_.unix_now();
      log::info(str(w.name, " (restart ", w.restarts, ") has weight version ", version, "; taking requests"));
    }
  }
}

void WorkerFleet::on_request_sent(int worker) {
  const WorkerSlot& w = workers_[worker];
  if (w.failure_record < 0) return;  // a replacement: when it took work (build/bench/fault_recovery_bench reads it)
  double& first_request = stats_.failures[w.failure_record].replacement_first_request_at;
  if (first_request == 0) first_request = port_.unix_now();
}

void WorkerFleet::count_idle(double dt, const std::function<bool(int worker)>& busy) {
  for (size_t i = 0; i < workers_.size(); ++i) {
    WorkerSlot& w = workers_[i];
    if (w.role != Role::kRollout || busy(static_cast<int>(i))) continue;
    w.idle_seconds += dt;
    metrics_.rollout_idle_seconds[w.name]->Increment(dt);
  }
}

void WorkerFleet::shutdown(const std::string& reason) {
  accepting_exits_ = true;
  for (const WorkerSlot& w : workers_) {
    if (w.registered) (void)port_.send_to(w.name, Shutdown{reason});
  }
}

}  // namespace rlrun::orchestrator
