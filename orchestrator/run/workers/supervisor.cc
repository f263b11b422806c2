// run/workers/supervisor.cc - verdicts on rollout workers, restart back-off, the replacement's command.
#include "orchestrator/run/workers/supervisor.h"

#include <algorithm>
#include <cmath>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {

double seconds_between(WorkerSupervisor::Clock::time_point from, WorkerSupervisor::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

WorkerSupervisor::Verdict WorkerSupervisor::judge(const WorkerSlot& w, bool backlogged, Clock::time_point now) const {
  using Act = Verdict::Act;
  const double silent = seconds_between(w.last_heard, now);
  if (w.alive() && w.registered && !backlogged && silent > policy_.heartbeat_timeout_seconds)
    return {Act::kFail, str("silent for ", silent, " s (heartbeat_timeout_seconds = ",
                            policy_.heartbeat_timeout_seconds, "): stopped or dead")};
  if (w.role != Role::kRollout) return {};
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
  const double backoff = restart_backoff(policy_.restart_backoff_seconds, w.restarts, policy_.restart_backoff_max_seconds);
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

double restart_backoff(double base_seconds, int restart, double max_seconds) {
  // 2^(restart - 1) overflows to inf past ~1000 restarts: cap the exponent before the product.
  const double doubled = base_seconds * std::pow(2.0, std::min(restart - 1, 60));
  return std::min(doubled, std::max(base_seconds, max_seconds));
}

ProcessSpec trainer_restart_spec(const ProcessSpec& original, const std::string& checkpoint, int restart) {
  ProcessSpec spec = original;
  std::vector<std::string> argv;
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    const std::string& a = spec.argv[i];
    if ((a == "--resume-from" || a == "--dp-group-epoch" || a == "--weight-group-epoch") && i + 1 < spec.argv.size()) {
      ++i;  // and its value
      continue;
    }
    argv.push_back(a);
  }
  if (!checkpoint.empty()) argv.insert(argv.end(), {"--resume-from", checkpoint});
  argv.insert(argv.end(), {"--dp-group-epoch", str(restart), "--weight-group-epoch", "-1"});
  spec.argv = std::move(argv);
  return spec;
}

}  // namespace rlrun::orchestrator
