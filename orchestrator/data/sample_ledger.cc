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
  it->second = to;
  return true;
}

bool SampleLedger::dispatched(uint64_t id) {
  if (!states_.emplace(id, SampleState::kInFlight).second) {
    ++anomalies_;
    return false;
  }
  return true;
}

bool SampleLedger::generated(uint64_t id) {
  if (!move(id, SampleState::kInFlight, SampleState::kInFlight, SampleState::kGenerated)) return false;
  ++generated_;
  return true;
}

bool SampleLedger::trained(uint64_t id) {
  return move(id, SampleState::kGenerated, SampleState::kGenerated, SampleState::kTrained);
}

bool SampleLedger::discarded(uint64_t id, const std::string& reason) {
  if (!move(id, SampleState::kInFlight, SampleState::kGenerated, SampleState::kDiscarded)) return false;
  ++discarded_[reason];
  return true;
}

bool SampleLedger::cancelled(uint64_t id) {
  return move(id, SampleState::kInFlight, SampleState::kInFlight, SampleState::kCancelled);
}

SampleState SampleLedger::state(uint64_t id) const {
  auto it = states_.find(id);
  RLRUN_CHECK(it != states_.end(), "sample id was never dispatched");
  return it->second;
}

SampleLedger::Summary SampleLedger::summary() const {
  Summary s;
  s.dispatched = static_cast<int64_t>(states_.size());
  s.generated = generated_;
  s.discarded = discarded_;
  s.anomalies = anomalies_;
  for (const auto& [id, state] : states_) {
    switch (state) {
      case SampleState::kInFlight: ++s.in_flight; break;
      case SampleState::kGenerated: ++s.lost; break;
      case SampleState::kTrained: ++s.trained; break;
      case SampleState::kCancelled: ++s.cancelled; break;
      case SampleState::kDiscarded: break;  // counted by reason
    }
  }
  return s;
}

}  // namespace rlrun::orchestrator
