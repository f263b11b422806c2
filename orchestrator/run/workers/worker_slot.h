// worker_slot.h - a worker process as the orchestrator sees it: its name, role and rank, how it
// was started, and where it is in its life (run/workers/supervisor.h decides restarts; only kReady
// rollout workers get requests from the Dispatcher, run/samples/dispatcher.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/protocol/protocol.h"
#include "orchestrator/launch/launcher.h"

namespace rlrun::orchestrator {

enum class WorkerState : uint8_t {
  kStarting,      // launched, not registered yet
  kNeedsWeights,  // registered; has not finished a weight sync yet
  kReady,
  kDead,          // exited or killed; a replacement starts at restart_at
};

struct WorkerSlot {
  std::string name;      // worker_name(role, rank): also the control-plane identity
  Role role = Role::kTrainer;
  int rank = 0;
  std::string log_path;
  bool registered = false;
  double idle_seconds = 0;
  int compute_threads = 0;           // CPU backend: the threads it computes with (spec.cpus, or SetThreads')
  double kl_reference_seconds = 0;   // its process's CPU seconds scoring the KL reference, as last heard
  ProcessSpec spec{};    // how it was started: a replacement starts the same way
  WorkerState state = WorkerState::kStarting;
  int restarts = 0;
  bool awaiting_exit = false;  // killed by the orchestrator: its exit is not a new failure
  std::chrono::steady_clock::time_point last_heard{}, started_at{}, restart_at{};
  int failure_record = -1;     // index of its last failure in RunOutcome::worker_failures

  bool alive() const { return state == WorkerState::kNeedsWeights || state == WorkerState::kReady; }
  bool serves() const { return role == Role::kRollout && state == WorkerState::kReady; }
};

// The mean over the rollout workers of idle_seconds / loop_seconds (0 for loop_seconds <= 0).
inline double rollout_idle_fraction(const std::vector<WorkerSlot>& workers, double loop_seconds) {
  double idle = 0;
  int rollouts = 0;
  for (const WorkerSlot& w : workers) {
    if (w.role != Role::kRollout) continue;
    idle += loop_seconds > 0 ? w.idle_seconds / loop_seconds : 0;
    ++rollouts;
  }
  return rollouts ? idle / rollouts : 0;
}

}  // namespace rlrun::orchestrator
