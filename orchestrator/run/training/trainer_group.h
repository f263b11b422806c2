// run/training/trainer_group.h - the trainer ranks as one group: a batch to every rank and their
// answers, a failure found (exit, silence, an error, a hang) and the whole group's restart from
// the newest checkpoint (run/training/README.md has the whole recovery: what is trained again, what
// the ledger counts).
//
// Rules:
//  - train(): every rank gets its TrainBatch; the wait ends when every rank answered. A rank's
//    ErrorReply ends it with that error. One that says the rank lost its data-parallel group (a
//    collective unavailable or timed out: a peer died or stopped) is a failure of the group: the
//    peer's death if the loop finds one within a short grace (hooks.find_dead_peer), else this
//    rank's.
//  - A rank that has not answered train_step_timeout_seconds after a train, a weight send or a
//    checkpoint save began is hung (check_timeout(): the first such rank, naming the others).
//  - note_failure(): the first failure found is kept until begin_restart() takes it; failure()
//    is it as the error that ends the wait in progress.
//  - A restart: every live rank is killed; after trainer_restart_backoff_seconds * 2^(restarts -
//    1) (at most restart_backoff_max_seconds), and their exits, every rank starts again
//    (supervisor.h: trainer_restart_spec) loading the checkpoint given ("" = the start weights)
//    and must register within kRestartRegistrationSeconds. After max_trainer_restarts restarts the
//    next failure is the run's error, naming the rank's log.
// Statistics: every failure (where the run was, what it restarted from, the steps redone and
// lost, its times) and the restarts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "orchestrator/data/batcher.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/workers/worker_slot.h"

namespace rlrun::orchestrator {

class TrainerGroup {
 public:
  using Clock = LoopPort::Clock;
  // A killed process's exit comes within moments; past this something else is wrong.
  static constexpr double kExitWaitSeconds = 60;
  // Replacements build their models (and load the checkpoint) before registering.
  static constexpr double kRestartRegistrationSeconds = 300;

  struct Stats {
    // One per trainer failure; times are Unix seconds (0: did not happen).
    struct Failure {
      std::string worker, reason;  // the rank found failed first, and how
      int64_t step = 0;            // steps completed when it failed
      std::string checkpoint;      // the folder the group restarted from; "" = the start weights
      int64_t restored_step = 0;   // that checkpoint's step (the step counter goes back to it)
      int64_t steps_redone = 0;    // steps trained again from their kept batches
      int64_t steps_lost = 0;      // steps after the checkpoint whose batches were not kept (trainer_replay_max_steps)
      double detected_at = 0;
      double restart_started_at = 0;  // the new ranks were started (after the back-off)
      double restart_ready_at = 0;    // every rank and every rollout worker holds the restored weights
      double first_step_at = 0;       // the first step after the restart completed
    };
    std::vector<Failure> failures;
    int64_t restarts = 0;
  };
  struct Hooks {
    // A collective failed on a rank: the death of the worker that caused it, if one shows within
    // a short grace, as the error; else `failure`.
    std::function<Status(const Status& failure)> find_dead_peer;
  };
  // One restart in progress (begin_restart() to restored()).
  struct Restart {
    int number = 0;           // 1-based
    std::string checkpoint;   // "" = the start weights
    int64_t restored_step = 0;
    double backoff_seconds = 0;
    size_t record = 0;        // its Stats::failures entry
  };

  // `workers` (the fleet's), `launcher` and `metrics` must outlive the group.
  TrainerGroup(const Config& config, std::vector<WorkerSlot>& workers, Launcher& launcher, RunMetrics& metrics,
               LoopPort port, Hooks hooks);

  // ---- a batch: per_rank[r] to rank r; waits (LoopPort::wait) until every rank answered.
  // `what` names it in errors ("trainer step 12").
  Status train(const BatchBuild& build, const std::string& what, bool dispatch);
  void on_result(const TrainResult& result);
  void on_error(const std::string& peer, const ErrorReply& error);  // to a TrainBatch
  const std::map<std::string, double>& rank0_metrics() const;       // of the last batch

  // ---- failures
  Status note_failure(const WorkerSlot& w, const std::string& why);
  bool failed() const { return pending_.has_value(); }
  Status failure() const;
  // Past train_step_timeout_seconds since `started`, the first rank `answered` says no to is hung.
  Status check_timeout(const std::string& what, Clock::time_point started,
                       const std::function<bool(int rank)>& answered);

  // ---- the restart after a failure
  // Takes the failure (where the run was: `steps_completed`), records it and kills every rank;
  // the error when max_trainer_restarts are used up. `checkpoint`/`restored_step`: what the ranks
  // will load ("" = the start weights).
  Result<Restart> begin_restart(const std::string& checkpoint, int64_t restored_step, int64_t steps_completed);
  // Waits for the exits and the back-off, starts every rank, waits for their registration.
  Status relaunch(const Restart& restart, bool dispatch);
  // Every rank and rollout worker holds the restored weights.
  void restored(const Restart& restart, int64_t steps_redone, int64_t steps_lost);
  void step_completed();  // the first after a restart has its time
  const Stats& stats() const { return stats_; }

 private:
  const WorkerSlot* by_name(const std::string& name) const;

  const Config& config_;
  std::vector<WorkerSlot>& workers_;
  Launcher& launcher_;
  RunMetrics& metrics_;
  LoopPort port_;
  Hooks hooks_;
  std::map<int, TrainResult> results_;  // by rank
  std::string error_;
  // The rank whose step failed in a collective (unavailable, timeout: its data-parallel peer died
  // or stopped); "" otherwise.
  std::string lost_group_;
  struct Pending {
    std::string worker, reason;
    double detected_at = 0;
  };
  std::optional<Pending> pending_;
  int first_step_record_ = -1;  // a failure waiting for its first_step_at
  Stats stats_;
};

}  // namespace rlrun::orchestrator
