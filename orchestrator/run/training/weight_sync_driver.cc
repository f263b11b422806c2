#include "orchestrator/run/training/weight_sync_driver.h"

#include <algorithm>

#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/roles/model_from_config.h"

namespace rlrun::orchestrator {

WeightSyncDriver::WeightSyncDriver(const Config& config, const std::vector<WorkerSlot>& workers, RunMetrics& metrics,
                                   int64_t weight_bytes, LoopPort port, Hooks hooks)
    : config_(config), workers_(workers), metrics_(metrics), weight_bytes_(weight_bytes), port_(std::move(port)),
      hooks_(std::move(hooks)) {}

Status WeightSyncDriver::sync(uint64_t version, bool dispatch) {
  ScopedSpan span("weight_sync", "orchestrator");
  span.arg("version", static_cast<int64_t>(version));
  const auto start = port_.now();
  rounds_.want(version);
  RLRUN_RETURN_IF_ERROR(port_.wait([&] { return !rounds_.target().has_value(); }, dispatch));
  last_seconds_ = port_.seconds_since(start);
  metrics_.weight_sync_seconds->Increment(last_seconds_);
  metrics_.weight_sync_bytes->Increment(static_cast<double>(weight_bytes_));
  return Status();
}

void WeightSyncDriver::on_end(const std::string& member, const WeightSyncEnd& end) {
  rounds_.on_end(member, end.ok, end.error, port_.now());
}

void WeightSyncDriver::member_died(const std::string& member) {
  const bool held = rounds_.holding();
  if (std::optional<uint32_t> epoch = rounds_.member_died(member, port_.now())) hooks_.abandon_group(*epoch);
  if (held && !rounds_.holding())
    log::info(str(member, "'s failure explains the failed weight sync: it runs again once the replacement has registered"));
}

void WeightSyncDriver::sender_lost() {
  // A round in flight fails (its receivers see the sockets close), the next round re-forms the
  // group, and none starts before the restored weights' own.
  if (std::optional<uint32_t> epoch = rounds_.member_died(weight_sender(), port_.now())) hooks_.abandon_group(*epoch);
  rounds_.forget_target();
  restoring_ = true;
}

void WeightSyncDriver::start_round(uint64_t version) {
  std::set<std::string> members;
  for (const WorkerSlot& w : workers_) {
    if (w.role == Role::kRollout || w.rank == 0) members.insert(w.name);
  }
  const auto now = port_.now();
  const SyncRounds::Round& round = rounds_.begin(version, members, now);
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
    if (const Status s = port_.send_to(name, begin); !s.ok()) rounds_.not_delivered(name, s.message(), now);
  }
}

Status WeightSyncDriver::finish_round() {
  const SyncRounds::Outcome round = rounds_.finish();
  if (round.ok) {
    hooks_.synced(round.version);
    return Status();
  }
  if (round.retry) {
    log::warn(str("weight sync of version ", round.version, " over weights-", round.epoch,
                  " broke (a member died); it runs again once the replacement has registered"));
    return Status();
  }
  // Every member was alive as far as the heartbeats tell; one that stopped is found silent within
  // heartbeat_timeout_seconds, and its failure then explains this one (member_died).
  const double grace = config_.heartbeat_timeout_seconds + 1.0;
  log::warn(str("weight sync of version ", round.version, " failed: ", errors(round),
                "; if a member turns out dead or hung within ", grace, " s it runs again, else the run stops"));
  rounds_.hold(round, port_.now() + std::chrono::milliseconds(static_cast<int64_t>(grace * 1000)));
  return Status();
}

std::string WeightSyncDriver::errors(const SyncRounds::Outcome& round) {
  std::string errors;
  for (const std::string& e : round.errors) errors += str(errors.empty() ? "" : "; ", e);
  return errors;
}

Status WeightSyncDriver::advance() {
  if (rounds_.holding()) {  // no round until the failed one is explained or counts
    if (const std::optional<SyncRounds::Outcome> failed = rounds_.expired_hold(port_.now()))
      return internal_error(str("weight sync of version ", failed->version, " failed: ", errors(*failed)));
    return Status();
  }
  if (const SyncRounds::Round* round = rounds_.round()) {
    if (rounds_.answered()) return finish_round();
    const double timeout = config_.rollout_request_timeout_seconds;
    // Once the sender (trainer rank 0) answered, a receiver has all the bytes (or the sender left
    // the group: it fails at once), or is still in the engine step it began before the sync. One
    // that has not answered rollout_request_timeout_seconds later is hung; a stopped or dead one
    // is found sooner by its silence (WorkerFleet). The sender is bounded by its collectives.
    const auto now = port_.now();
    if (!rounds_.waits_for(weight_sender()) &&
        std::chrono::duration<double>(now - round->sender_answered_at).count() > timeout) {
      const std::set<std::string> hung = round->waiting;
      const uint64_t version = round->version;
      for (const std::string& name : hung) {
        for (size_t i = 0; i < workers_.size(); ++i) {
          if (workers_[i].name != name || workers_[i].role == Role::kTrainer) continue;  // ranks > 0 are not members
          RLRUN_RETURN_IF_ERROR(hooks_.fail_worker(static_cast<int>(i),
                                                   str("hung in the weight sync of version ", version, " (", timeout,
                                                       " s after the sender finished; rollout_request_timeout_seconds)")));
        }
      }
    } else if (rounds_.waits_for(weight_sender()) &&
               std::chrono::duration<double>(now - round->start).count() > config_.train_step_timeout_seconds) {
      for (const WorkerSlot& w : workers_) {
        if (w.name != weight_sender()) continue;
        return hooks_.trainer_failed(w, str("did not finish the weight sync of version ", round->version, " within ",
                                            config_.train_step_timeout_seconds, " s (train_step_timeout_seconds)"));
      }
    }
    return rounds_.answered() ? finish_round() : Status();
  }
  const bool complete = std::all_of(workers_.begin(), workers_.end(), [](const WorkerSlot& w) { return w.alive(); });
  if (!complete) return Status();
  if (rounds_.target()) {
    start_round(*rounds_.target());
    return Status();
  }
  // A replacement catches up on the current version, unless the trainer is changing its weights
  // (a step in flight): the step's own sync then includes it; or the trainer group is restarting:
  // the restored weights' sync (run/training/trainer_group.h) includes it.
  if (restoring_) return Status();
  bool needs_weights = false;
  for (const WorkerSlot& w : workers_) needs_weights = needs_weights || w.state == WorkerState::kNeedsWeights;
  if (needs_weights && rounds_.started() && !hooks_.training()) start_round(rounds_.synced_version());
  return Status();
}

}  // namespace rlrun::orchestrator
