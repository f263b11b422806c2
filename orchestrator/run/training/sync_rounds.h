// sync_rounds.h - the state and rules of weight-sync rounds, without I/O: the Orchestrator sends
// WeightSyncBegin to the members a round names and feeds back what they answer
// (run/training/weight_sync.cc).
//
// A round moves one weight version from trainer rank 0 (the sender, "trainer-0") to every rollout
// worker over the group "weights-<epoch>". Rules:
//  - want(v) sets the version the run waits for; a round that ends well at v clears it.
//  - A round that fails (a member died, or a member reported an error) breaks the group: the next
//    round names epoch + 1, and every member joins that group first. The first round uses epoch 0.
//  - A member's death ends its part of the round at once (it is no longer waited for) and fails
//    the round; a round failed that way is retried, one failed with every member alive is the
//    run's error (finish() says which).
//  - An answer from a member the round does not wait for (an old round's) is ignored.
//  - After a trainer restart the version wanted is forgotten: the restart asks for the restored one.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/protocol.h"

namespace rlrun::orchestrator {

// The sender of every round: trainer rank 0 ("trainer-0").
inline std::string weight_sender() { return worker_name(Role::kTrainer, 0); }

class SyncRounds {
 public:
  using Clock = std::chrono::steady_clock;
  struct Round {
    uint64_t version = 0;
    uint32_t epoch = 0;
    bool reformed = false;            // this round re-forms the group (a new epoch)
    std::set<std::string> members;    // every member, as it began
    std::set<std::string> waiting;    // members whose WeightSyncEnd has not come
    std::vector<std::string> errors;  // "member: error"
    bool saw_death = false;           // a member died: the round fails, a later one retries
    Clock::time_point start, sender_answered_at;
    bool failed() const { return saw_death || !errors.empty(); }
  };
  struct Outcome {
    uint64_t version = 0;
    uint32_t epoch = 0;
    bool ok = false;
    bool retry = false;               // failed by a death: run it again once the group is whole
    std::vector<std::string> errors;  // when it failed with every member alive
    std::set<std::string> members;
  };

  void want(uint64_t version) { target_ = version, started_ = true; }
  // The version wanted is no longer the one to send (the trainer group restarts from a checkpoint).
  void forget_target() { target_.reset(); }
  const std::optional<uint64_t>& target() const { return target_; }
  bool started() const { return started_; }       // want() was called: there are weights to give
  uint64_t synced_version() const { return synced_version_; }
  uint32_t epoch() const { return epoch_; }

  // Starts a round of `version` waiting for `members` (the sender among them).
  const Round& begin(uint64_t version, std::set<std::string> members, Clock::time_point now);
  const Round* round() const { return round_ ? &*round_ : nullptr; }
  bool waits_for(const std::string& member) const { return round_ && round_->waiting.count(member) > 0; }

  // `member` could not be told (WeightSyncBegin not delivered): the round fails.
  void not_delivered(const std::string& member, const std::string& error, Clock::time_point now);
  void on_end(const std::string& member, bool ok, const std::string& error, Clock::time_point now);
  // A member died (or was killed). Returns the epoch of the round it broke, if one was running.
  // The sender's death counts as its answer at `now`: the receivers then have the usual bound to
  // see its sockets close and answer.
  std::optional<uint32_t> member_died(const std::string& member, Clock::time_point now = Clock::now());

  // The round in flight has every answer (or none is coming): finish() ends it.
  bool answered() const { return round_ && round_->waiting.empty(); }
  Outcome finish();

  // A round that failed with every member alive, as far as the caller knows, is held until
  // `until` before it counts: a member that stopped (SIGSTOP: alive, silent) can fail its peers'
  // collective before its silence is noticed. member_died() of one of its members within the
  // grace drops it (the round runs again once the group is whole); no round starts meanwhile.
  void hold(Outcome failed, Clock::time_point until) { held_ = Held{std::move(failed), until}; }
  bool holding() const { return held_.has_value(); }
  // The held failure once its grace ran out (taken); nothing before, or when none is held.
  std::optional<Outcome> expired_hold(Clock::time_point now);

 private:
  std::optional<Round> round_;
  struct Held {
    Outcome outcome;
    Clock::time_point until;
  };
  std::optional<Held> held_;
  std::optional<uint64_t> target_;
  uint64_t synced_version_ = 0;
  bool started_ = false;
  uint32_t epoch_ = 0;
  bool broken_ = false;  // the next round re-forms the group
};

}  // namespace rlrun::orchestrator
