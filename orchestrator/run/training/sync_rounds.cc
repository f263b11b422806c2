#include "orchestrator/run/training/sync_rounds.h"

#include "common/observe/log.h"

namespace rlrun::orchestrator {

const SyncRounds::Round& SyncRounds::begin(uint64_t version, std::set<std::string> members, Clock::time_point now) {
  Round r;
  r.reformed = broken_;
  if (broken_) ++epoch_;
  broken_ = false;
  r.version = version;
  r.epoch = epoch_;
  r.start = now;
  r.members = members;
  r.waiting = std::move(members);
  round_ = std::move(r);
  return *round_;
}

void SyncRounds::not_delivered(const std::string& member, const std::string& error, Clock::time_point now) {
  if (!round_ || round_->waiting.erase(member) == 0) return;
  round_->errors.push_back(str(member, ": WeightSyncBegin not delivered: ", error));
  if (member == weight_sender()) round_->sender_answered_at = now;
}

void SyncRounds::on_end(const std::string& member, bool ok, const std::string& error, Clock::time_point now) {
  if (!round_ || round_->waiting.erase(member) == 0) return;  // a round that already ended
  if (member == weight_sender()) round_->sender_answered_at = now;
  if (!ok) round_->errors.push_back(str(member, ": ", error));
}

std::optional<uint32_t> SyncRounds::member_died(const std::string& member, Clock::time_point now) {
  broken_ = true;
  if (held_ && held_->outcome.members.count(member) > 0) held_.reset();  // its failure is explained
  if (!round_) return std::nullopt;
  if (round_->waiting.erase(member) > 0 && member == weight_sender()) round_->sender_answered_at = now;
  round_->saw_death = true;
  return round_->epoch;
}

SyncRounds::Outcome SyncRounds::finish() {
  Round r = std::move(*round_);
  round_.reset();
  Outcome o{r.version, r.epoch, !r.failed(), r.saw_death, {}, r.members};
  if (o.ok) {
    synced_version_ = r.version;
    if (target_ == r.version) target_.reset();
    return o;
  }
  broken_ = true;
  if (!r.saw_death) o.errors = std::move(r.errors);
  return o;
}

std::optional<SyncRounds::Outcome> SyncRounds::expired_hold(Clock::time_point now) {
  if (!held_ || now < held_->until) return std::nullopt;
  Outcome o = std::move(held_->outcome);
  held_.reset();
  return o;
}

}  // namespace rlrun::orchestrator
