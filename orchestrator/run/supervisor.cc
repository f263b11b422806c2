// run/supervisor.cc - verdicts on rollout workers, restart back-off, the replacement's command.
#include "orchestrator/run/supervisor.h"

#include <cmath>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {

double seconds_between(WorkerSupervisor::Clock::time_point from, WorkerSupervisor::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

WorkerSupervisor::Verdict WorkerSupervisor::judge(const WorkerSlot& w, bool syncing, bool backlogged,
                                                  Clock::time_point now) const {
  using Act = Verdict::Act;
  if (w.role != Role::kRollout) return {};
  const double silent = seconds_between(w.last_heard, now);
  if (w.alive() && !syncing && !backlogged && silent > policy_.heartbeat_timeout_seconds)
    return {Act::kFail,
            str("silent for ", silent, " s (heartbeat_timeout_seconds = ", policy_.heartbeat_timeout_seconds, ")")};
  if (w.state == WorkerState::kStarting && w.restarts > 0 &&
      seconds_between(w.started_at, now) > policy_.registration_timeout_seconds)
    return {Act::kFail, str("did not register within ", policy_.registration_timeout_seconds, " s")};
  if (w.state == WorkerState::kDead && !w.awaiting_exit && now >= w.restart_at) return {Act::kRestart, ""};
  return {};
}

std::optional<double> WorkerSupervisor::on_failure(WorkerSlot& w, Clock::time_point now) const {
  w.state = WorkerState::kDead;
  w.registered = false;
  if (w.restarts >= policy_.max_restarts) return std::nullopt;
  ++w.restarts;
  const double backoff = policy_.restart_backoff_seconds * std::pow(2.0, w.restarts - 1);
  w.restart_at = now + std::chrono::milliseconds(static_cast<int64_t>(backoff * 1000));
  return backoff;
}

ProcessSpec WorkerSupervisor::start_replacement(WorkerSlot& w, Clock::time_point now) const {
  ProcessSpec spec = w.spec;
  std::vector<std::string>& argv = spec.argv;
  bool has_incarnation = false;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--weight-group-epoch") argv[i + 1] = "-1";
    if (argv[i] == "--incarnation") argv[i + 1] = str(w.restarts), has_incarnation = true;
  }
  if (!has_incarnation) argv.insert(argv.end(), {"--incarnation", str(w.restarts)});
  w.state = WorkerState::kStarting;
  w.started_at = now;
  return spec;
}

}  // namespace rlrun::orchestrator
