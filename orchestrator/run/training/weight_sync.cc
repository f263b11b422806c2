// run/training/weight_sync.cc - weight sync rounds: trainer rank 0 sends a weight version to every rollout worker
// over the group "weights-<epoch>".
//
// A round needs every member (the group has a fixed size: trainer rank 0 + every rollout worker),
// so it starts only when every rollout worker is registered and alive. After a member died, or a
// round failed (a failed collective leaves the group out of step), the next round names a new
// epoch and every member joins that group first. A member that dies during a round breaks it: the
// others fail within the group's timeouts (rendezvous.h), the round ends failed without stopping
// the run, and a new one starts once the replacement registered. A round that fails with every
// member alive stops the run with the members' errors. The rounds' state and rules are
// SyncRounds (sync_rounds.h); this file does their I/O.
#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

bool Orchestrator::group_complete() const {
  for (const WorkerSlot& w : workers_) {
    if (w.state != WorkerState::kNeedsWeights && w.state != WorkerState::kReady) return false;
  }
  return true;
}

Status Orchestrator::weight_sync(uint64_t version) {
  ScopedSpan span("weight_sync", "orchestrator");
  span.arg("version", static_cast<int64_t>(version));
  const auto start = Clock::now();
  sync_.want(version);
  while (sync_.target()) RLRUN_RETURN_IF_ERROR(tick(kTick, looping_));
  last_sync_seconds_ = seconds_since(start);
  metrics_.weight_sync_seconds->Increment(last_sync_seconds_);
  metrics_.weight_sync_bytes->Increment(static_cast<double>(weight_bytes_));
  return Status();
}

void Orchestrator::start_round(uint64_t version) {
  std::set<std::string> members;
  for (const WorkerSlot& w : workers_) {
    if (w.role == Role::kRollout || w.rank == 0) members.insert(w.name);
  }
  const auto now = Clock::now();
  const SyncRounds::Round& round = sync_.begin(version, members, now);
  WeightSyncBegin begin;
  begin.version = version;
  begin.bucket_bytes = static_cast<uint64_t>(config_.weight_broadcast_bucket_mb) << 20;
  begin.metadata_cached = true;  // the layout travels over the weight group itself
  begin.group_epoch = round.epoch;
  // Version 0 is the policy before its first RL update: the KL reference (trainer/train_step.h).
  begin.kl_reference = version == 0 && rollout_scores_kl_reference(config_);
  if (round.reformed)
    log::info(str("weight sync of version ", version, " re-forms the weight group as weights-", round.epoch));
  else  // log_level debug: when each sync starts (bench/chaos_soak.py aims faults at it)
    log::debug(str("weight sync of version ", version, " begins"));
  for (const std::string& name : members) {
    if (const Status s = server_.send(name, begin); !s.ok()) sync_.not_delivered(name, s.message(), now);
  }
}

Status Orchestrator::finish_round() {
  const SyncRounds::Outcome round = sync_.finish();
  if (round.ok) {
    for (WorkerSlot& w : workers_) {
      if (w.state != WorkerState::kNeedsWeights) continue;
      w.state = WorkerState::kReady;
      if (w.failure_record >= 0) {
        outcome_.worker_failures[w.failure_record].replacement_ready_at = unix_now();
        log::info(str(w.name, " (restart ", w.restarts, ") has weight version ", round.version, "; taking requests"));
      }
    }
    return Status();
  }
  if (round.retry) {
    log::warn(str("weight sync of version ", round.version, " over weights-", round.epoch,
                  " broke (a member died); it runs again once the replacement has registered"));
    return Status();
  }
  // Every member was alive as far as the heartbeats tell; one that stopped is found silent within
  // heartbeat_timeout_seconds, and its failure then explains this one (fail_worker).
  const double grace = config_.heartbeat_timeout_seconds + 1.0;
  log::warn(str("weight sync of version ", round.version, " failed: ", sync_errors(round),
                "; if a member turns out dead or hung within ", grace, " s it runs again, else the run stops"));
  sync_.hold(round, Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace * 1000)));
  return Status();
}

std::string Orchestrator::sync_errors(const SyncRounds::Outcome& round) {
  std::string errors;
  for (const std::string& e : round.errors) errors += str(errors.empty() ? "" : "; ", e);
  return errors;
}

Status Orchestrator::advance_sync() {
  if (sync_.holding()) {  // no round until the failed one is explained or counts
    if (const std::optional<SyncRounds::Outcome> failed = sync_.expired_hold(Clock::now()))
      return internal_error(str("weight sync of version ", failed->version, " failed: ", sync_errors(*failed)));
    return Status();
  }
  if (const SyncRounds::Round* round = sync_.round()) {
    if (sync_.answered()) return finish_round();
    const double timeout = config_.rollout_request_timeout_seconds;
    // Once the sender (trainer rank 0) answered, a receiver has all the bytes (or the sender left
    // the group: it fails at once), or is still in the engine step it began before the sync. One
    // that has not answered rollout_request_timeout_seconds later is hung; a stopped or dead one
    // is found sooner by its silence (supervise.cc). The sender is bounded by its collectives.
    if (!sync_.waits_for(weight_sender()) && seconds_since(round->sender_answered_at) > timeout) {
      const std::set<std::string> hung = round->waiting;
      const uint64_t version = round->version;
      for (const std::string& name : hung) {
        WorkerSlot* w = worker_by_name(name);
        if (w->role == Role::kTrainer) continue;  // ranks > 0 are not members
        RLRUN_RETURN_IF_ERROR(fail_worker(static_cast<int>(w - workers_.data()),
                                          str("hung in the weight sync of version ", version, " (", timeout,
                                              " s after the sender finished; rollout_request_timeout_seconds)"),
                                          false));
      }
    } else if (sync_.waits_for(weight_sender()) && seconds_since(round->start) > config_.train_step_timeout_seconds) {
      return note_trainer_failure(*worker_by_name(weight_sender()),
                                  str("did not finish the weight sync of version ", round->version, " within ",
                                      config_.train_step_timeout_seconds, " s (train_step_timeout_seconds)"));
    }
    return sync_.answered() ? finish_round() : Status();
  }
  if (!group_complete()) return Status();
  if (sync_.target()) {
    start_round(*sync_.target());
    return Status();
  }
  // A replacement catches up on the current version, unless the trainer is changing its weights
  // (a step in flight): the step's own sync then includes it; or the trainer group is restarting:
  // the restored weights' sync (run/training/trainer_recovery.cc) includes it.
  if (restoring_trainers_) return Status();
  bool needs_weights = false;
  for (const WorkerSlot& w : workers_) needs_weights = needs_weights || w.state == WorkerState::kNeedsWeights;
  const bool training = replay_.in_progress() != nullptr;
  if (needs_weights && sync_.started() && !training) start_round(sync_.synced_version());
  return Status();
}

}  // namespace rlrun::orchestrator
