// run/workers/worker_fleet.h - the run's worker processes as the loop keeps them: registration,
// heartbeats, exits and silences (the rules: WorkerSupervisor, supervisor.h), a failed rollout
// worker killed, its work handed back and its replacement started after the back-off, and what
// every process peaked at.
//
// Rules:
//  - on_register(): a worker of this run (name, role and rank as launched) is admitted
//    (RegisterAck: it needs weights now); any other peer gets an ErrorReply and nothing changes.
//  - heard(): a message from a live worker is a sign of life; one from a dead worker is dropped.
//  - on_heartbeat(): echoed (the echo proves the orchestrator lives), its memory on the gauges.
//  - take_exits() and judge(): a rollout worker that exited, fell silent or left a request
//    unanswered fails (fail()); a trainer rank's exit or silence goes to hooks.trainer_failed (the
//    whole trainer group restarts, run/training/trainer_group.h); a failed worker whose back-off ran
//    out is started again. After shutdown() exits are expected and nothing is judged.
//  - fail(): kills it unless it exited, hands its work back (hooks.release_work: requeued
//    samples, episode calls, KL scoring, a weight-sync round it was in), records the failure and
//    schedules the restart; past max_worker_restarts the error is the run's, naming its log.
//  - weights_synced(): workers that needed weights are ready; a replacement takes requests now.
// Statistics: every failure with its times (found, replacement started, ready, first request),
// restarts, each process's peak memory (heartbeats, train results) and its trainer phase peaks.
// What leaves goes through the port (acks, echoes, Shutdown); processes through the Launcher.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/protocol/control_plane.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/workers/supervisor.h"
#include "orchestrator/run/workers/worker_slot.h"

namespace rlrun::orchestrator {

class WorkerFleet {
 public:
  struct Stats {
    // One per rollout worker failure; times are Unix seconds (0: did not happen).
    struct Failure {
      std::string worker, reason;
      double detected_at = 0;
      double replacement_started_at = 0;
      double replacement_ready_at = 0;  // it had the current weights
      double replacement_first_request_at = 0;
    };
    std::vector<Failure> failures;
    int64_t restarts = 0;
    std::map<std::string, int64_t> peak_memory_bytes;  // by process
    // Trainer processes: the backend's peak bytes per phase ("forward_backward", "optimizer"),
    // from TrainResult: what `rlrun plan --compare` sets beside the plan.
    std::map<std::string, std::map<std::string, int64_t>> phase_peak_bytes;
  };
  struct Hooks {
    // A failed rollout worker's work goes back (it is about to be restarted).
    std::function<void(int worker)> release_work;
    // A trainer rank exited or fell silent: the trainer group's failure, as its error.
    std::function<Status(const WorkerSlot& w, const std::string& why)> trainer_failed;
  };

  // `workers`: the launched processes. `launcher` and `metrics` must outlive the fleet.
  WorkerFleet(std::vector<WorkerSlot> workers, SupervisionPolicy policy, Launcher& launcher, RunMetrics& metrics,
              LoopPort port, Hooks hooks);

  std::vector<WorkerSlot>& slots() { return workers_; }
  const std::vector<WorkerSlot>& slots() const { return workers_; }
  WorkerSlot* by_name(const std::string& name);
  bool all_registered() const;
  // Every worker registered and alive: the weight group can form.
  bool all_alive() const;

  // The registered worker, or nullptr when the peer was refused; an error: the answer not sent.
  Result<WorkerSlot*> on_register(const Incoming& in, const Register& reg);
  // A message came from `peer`: a sign of life. False when it is a dead worker's (drop it).
  bool heard(const std::string& peer);
  void on_heartbeat(const Incoming& in, const Heartbeat& hb);
  void on_train_result(const std::string& peer, const TrainResult& result);  // its memory peaks

  Status take_exits();
  // Silences, overdue registrations and restarts due. A trainer rank's silence ends the turn with
  // its error unless `hold_trainer_failures` (an evaluation runs: it needs no trainer).
  Status judge(bool backlogged, bool hold_trainer_failures);
  // `why`: "killed by signal 9 (SIGKILL)", "silent for 12 s", ... `exited`: no kill needed.
  Status fail(int index, const std::string& why, bool exited);
  void weights_synced(uint64_t version);
  void on_request_sent(int worker);  // a replacement's first request is a time in its failure's record
  // Adds `dt` seconds of idleness to each rollout worker `busy` says no to.
  void count_idle(double dt, const std::function<bool(int worker)>& busy);

  // Tells every registered worker to exit (best effort, no wait); exits are expected from now on.
  void shutdown(const std::string& reason);
  bool shutting_down() const { return accepting_exits_; }
  Stats& stats() { return stats_; }  // finish() adds the orchestrator's own peak
  const Stats& stats() const { return stats_; }

 private:
  Status restart(int index);

  std::vector<WorkerSlot> workers_;
  WorkerSupervisor supervisor_;
  Launcher& launcher_;
  RunMetrics& metrics_;
  LoopPort port_;
  Hooks hooks_;
  bool accepting_exits_ = false;
  Stats stats_;
};

}  // namespace rlrun::orchestrator
