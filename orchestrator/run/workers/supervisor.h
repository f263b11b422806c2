// supervisor.h - the rules of rollout worker failures and restarts, without I/O: the Orchestrator
// asks judge() about each worker every tick and acts on the verdict (run/workers/supervise.cc: kill through
// the Launcher, requeue its work through the Dispatcher, start the replacement).
//
// Rules:
//  - A live worker (rollout worker or trainer rank) fails when nothing came from it for
//    heartbeat_timeout_seconds, unless the orchestrator has not read every message that arrived (a
//    heartbeat may be among them). Workers beat from a thread of their own while they compute or
//    wait in a collective (common/protocol/liveness_beacon.h), so silence means a dead or stopped
//    process, never a long step or sync.
//  - A replacement fails when it has not registered within registration_timeout.
//  - A failed worker is restarted after worker_restart_backoff_seconds * 2^(restarts so far) (at
//    most restart_backoff_max_seconds), once
//    its process is gone; after max_worker_restarts restarts its next failure is the run's error.
//  - A replacement starts with the original's command, joins the weight group its first
//    WeightSyncBegin names (--weight-group-epoch -1), and knows its incarnation.
// A trainer rank's failure (silence here; an exit, a step or a send past
// train_step_timeout_seconds noticed by the orchestrator) restarts the whole trainer group,
// run/training/trainer_recovery.cc, with the two functions at the end of this file; judge() never asks to
// restart a trainer rank itself.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "orchestrator/launch/launcher.h"
#include "orchestrator/run/workers/worker_slot.h"

namespace rlrun::orchestrator {

struct SupervisionPolicy {
  double heartbeat_timeout_seconds = 30;
  double registration_timeout_seconds = 300;  // a replacement builds its model before registering
  double restart_backoff_seconds = 1;
  double restart_backoff_max_seconds = 300;  // the doubling stops here
  int max_restarts = 3;
};

class WorkerSupervisor {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WorkerSupervisor(SupervisionPolicy policy) : policy_(policy) {}

  struct Verdict {
    enum class Act { kNothing, kFail, kRestart } act = Act::kNothing;
    std::string why;  // kFail: "silent for 12 s (heartbeat_timeout_seconds = 10)", ...
  };
  // What to do about worker `w` now. `backlogged`: messages are left unread this turn.
  Verdict judge(const WorkerSlot& w, bool backlogged, Clock::time_point now) const;

  // Records a failure of `w` (already killed or exited): its state becomes kDead. Returns the
  // back-off before its restart, or nothing when its restarts are used up (the run stops).
  std::optional<double> on_failure(WorkerSlot& w, Clock::time_point now) const;
  // The command of w's replacement; marks `w` as starting.
  ProcessSpec start_replacement(WorkerSlot& w, Clock::time_point now) const;

  const SupervisionPolicy& policy() const { return policy_; }

 private:
  SupervisionPolicy policy_;
};

// Seconds to wait before restart number `restart` (1-based): base_seconds * 2^(restart - 1), at
// most max_seconds (restart_backoff_max_seconds; never below base_seconds): without the cap a
// long run's 20th restart would wait 12 days.
double restart_backoff(double base_seconds, int restart, double max_seconds);

// The command of a trainer rank for the trainer group's restart number `restart` (1-based): the
// original's, loading `checkpoint` (--resume-from; "" = none: the start weights), forming the
// gradient group "dp-<restart>" (--dp-group-epoch) and, on rank 0, joining the weight group at
// the first sync (--weight-group-epoch -1). Each flag replaces the original's.
ProcessSpec trainer_restart_spec(const ProcessSpec& original, const std::string& checkpoint, int restart);

}  // namespace rlrun::orchestrator
