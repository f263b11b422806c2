// run/training/weight_sync_driver.h - weight-sync rounds carried out: trainer rank 0 sends a weight
// version to every rollout worker over the group "weights-<epoch>" (design "A sample's life", step
// 8). The rounds' state and rules are SyncRounds (sync_rounds.h); this part sends WeightSyncBegin,
// takes the answers, bounds the waits and re-forms the group.
//
// Rules:
//  - A round needs every member (trainer rank 0 and every rollout worker: the group has a fixed
//    size), so it starts only when every worker is registered and alive.
//  - After a member died, or a round failed (a failed collective leaves the group out of step),
//    the next round names a new epoch and every member joins that group first. A member that dies
//    during a round breaks it: the others fail within the group's timeouts (rendezvous.h), the
//    round ends failed without stopping the run, and a new one starts once the replacement
//    registered. A round that fails with every member alive is held for heartbeat_timeout_seconds
//    + 1 (a stopped member is found silent meanwhile and explains it); then it stops the run with
//    the members' errors.
//  - Once the sender answered, a receiver that has not answered rollout_request_timeout_seconds
//    later is hung: it fails (hooks.fail_worker). A sender that has not answered within
//    train_step_timeout_seconds is hung: hooks.trainer_failed.
//  - Between rounds, a replacement that needs weights catches up on the current version, unless a
//    step is in training (its own sync includes it) or the trainer group is restoring (the
//    restored weights' sync does).
//  - A round that ends well makes the members that needed weights ready (hooks.synced).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/training/sync_rounds.h"
#include "orchestrator/run/workers/worker_slot.h"

namespace rlrun::orchestrator {

class WeightSyncDriver {
 public:
  struct Hooks {
    std::function<Status(int worker, const std::string& why)> fail_worker;                // a hung receiver
    std::function<Status(const WorkerSlot& w, const std::string& why)> trainer_failed;    // a hung sender
    std::function<void(uint32_t epoch)> abandon_group;  // weights-<epoch> will not form: free its joiners
    std::function<bool()> training;                     // a step is in training
    std::function<void(uint64_t version)> synced;       // every member holds `version`
  };

  // `workers` (the fleet's) and `metrics` must outlive the driver. `weight_bytes`: the f32
  // parameters one sync sends.
  WeightSyncDriver(const Config& config, const std::vector<WorkerSlot>& workers, RunMetrics& metrics,
                   int64_t weight_bytes, LoopPort port, Hooks hooks);

  // Waits (LoopPort::wait) until every rollout worker holds `version`, re-forming the group as needed.
  Status sync(uint64_t version, bool dispatch);
  Status advance();  // in every turn of the loop: finishes, bounds or starts a round
  void on_end(const std::string& member, const WeightSyncEnd& end);
  // A member died or was killed: a round it was in fails (a failed round held for an explanation
  // has it: it runs again once the group is whole), and its group's joiners are freed.
  void member_died(const std::string& member);
  // The trainer group restarts: its sender is gone, the version wanted is no longer the one to
  // send, and no replacement catches up until restored() (the restored weights' sync).
  void sender_lost();
  void restored() { restoring_ = false; }
  bool waits_for(const std::string& member) const { return rounds_.waits_for(member); }
  double last_seconds() const { return last_seconds_; }

 private:
  void start_round(uint64_t version);
  Status finish_round();
  static std::string errors(const SyncRounds::Outcome& round);  // "member: error; ..."

  const Config& config_;
  const std::vector<WorkerSlot>& workers_;
  RunMetrics& metrics_;
  int64_t weight_bytes_;
  LoopPort port_;
  Hooks hooks_;
  SyncRounds rounds_;
  bool restoring_ = false;  // from the trainer group's kill to the restored weights' sync
  double last_seconds_ = 0;
};

}  // namespace rlrun::orchestrator
