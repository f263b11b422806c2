// sample_ledger.h - where every dispatched sample is, so that nothing disappears silently.
//
// Each sample id moves through states: in flight (dispatched) -> generated (its result came back)
// -> trained, or -> discarded (with a reason), or in flight -> cancelled / discarded (a failed
// generation). The summary counts samples BY STATE: `lost` is the number of ids left in a state
// that is not final at the end of the run (generated but neither trained nor discarded), never a
// difference of totals. A transition the state machine does not allow (a duplicate result, a
// sample trained twice) changes nothing and is counted as an anomaly.
// Threads: one thread (the orchestrator's loop).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

namespace rlrun::orchestrator {

enum class SampleState : uint8_t { kInFlight, kGenerated, kTrained, kDiscarded, kCancelled };

class SampleLedger {
 public:
  struct Summary {
    int64_t dispatched = 0;
    int64_t generated = 0;        // results that came back with tokens (whatever happened next)
    int64_t trained = 0;
    std::map<std::string, int64_t> discarded;  // reason -> samples
    int64_t cancelled = 0;
    int64_t in_flight = 0;        // still in flight now (at exit: in_flight_at_exit)
    int64_t lost = 0;             // generated, never trained nor discarded
    int64_t anomalies = 0;        // refused transitions
    int64_t discarded_total() const;
  };

  // Each returns false (and counts an anomaly) when the sample is not in a state that allows it.
  bool dispatched(uint64_t id);
  bool generated(uint64_t id);
  bool trained(uint64_t id);
  bool discarded(uint64_t id, const std::string& reason);  // from in flight or generated
  bool cancelled(uint64_t id);                             // from in flight

  SampleState state(uint64_t id) const;  // RLRUN_CHECK: the id was dispatched
  Summary summary() const;

 private:
  bool move(uint64_t id, SampleState from_a, SampleState from_b, SampleState to);

  std::unordered_map<uint64_t, SampleState> states_;
  std::map<std::string, int64_t> discarded_;
  int64_t generated_ = 0;
  int64_t anomalies_ = 0;
};

}  // namespace rlrun::orchestrator
