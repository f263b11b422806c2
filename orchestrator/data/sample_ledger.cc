// sample_ledger.cc - the per-sample state machine and its summary.
#include "orchestrator/data/sample_ledger.h"

#include "common/check.h"

namespace rlrun::orchestrator {

int64_t SampleLedger::Summary::discarded_total() const {
  int64_t n = 0;
  for (const auto& [reason, count] : discarded) n += count;
  return n;
}

bool SampleLedger::move(uint64_t id, SampleState from_a, SampleState from_b, SampleState to) {
  auto it = states_.find(id);
  if (it == states_.end() || (it->second != from_a && it->second != from_b)) {
    ++anomalies_;
    return false;
  }
  if (to == SampleState::kFinished) {
    states_.erase(it);
  } else {
    it->second = to;
  }
  return true;
}

bool SampleLedger::dispatched(uint64_t id) {
  const bool seen = highest_dispatched_ && id <= *highest_dispatched_;  // held, or finished
  if (seen || !states_.emplace(id, SampleState::kInFlight).second) {
    ++anomalies_;
    return false;
  }
  highest_dispatched_ = id;
  ++dispatched_;
  return true;
}

bool SampleLedger::generated(uint64_t id) {
  if (!move(id, SampleState::kInFlight, SampleState::kInFlight, SampleState::kGenerated)) return false;
  ++generated_;
  return true;
}

bool SampleLedger::trained(uint64_t id) {
  if (!move(id, SampleState::kGenerated, SampleState::kGenerated, SampleState::kFinished)) return false;
  ++trained_;
  return true;
}

bool SampleLedger::discarded(uint64_t id, const std::string& reason) {
  if (!move(id, SampleState::kInFlight, SampleState::kGenerated, SampleState::kFinished)) return false;
  ++discarded_[reason];
  return true;
}

bool SampleLedger::cancelled(uint64_t id) {
  if (!move(id, SampleState::kInFlight, SampleState::kInFlight, SampleState::kFinished)) return false;
  ++cancelled_;
  return true;
}

SampleState SampleLedger::state(uint64_t id) const {
  auto it = states_.find(id);
  if (it != states_.end()) return it->second;
  RLRUN_CHECK(highest_dispatched_ && id <= *highest_dispatched_, "sample id was never dispatched");
  return SampleState::kFinished;
}

SampleLedger::Summary SampleLedger::summary() const {
  Summary s;
  s.dispatched = dispatched_;
  s.generated = generated_;
  s.trained = trained_;
  s.discarded = discarded_;
  s.cancelled = cancelled_;
  s.anomalies = anomalies_;
  for (const auto& [id, state] : states_) {
    if (state == SampleState::kInFlight) ++s.in_flight;
    if (state == SampleState::kGenerated) ++s.lost;
  }
  return s;
}

}  // namespace rlrun::orchestrator
