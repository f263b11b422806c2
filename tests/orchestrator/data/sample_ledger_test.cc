// The sample ledger: every dispatched sample ends in exactly one counted state.
#include "orchestrator/data/sample_ledger.h"

#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

TEST(SampleLedger, AccountingBalancesAndLostComesFromStates) {
  SampleLedger l;
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(l.dispatched(id));
  for (uint64_t id = 0; id < 7; ++id) ASSERT_TRUE(l.generated(id));
  ASSERT_TRUE(l.trained(0));
  ASSERT_TRUE(l.trained(1));
  ASSERT_TRUE(l.discarded(2, "zero_advantage"));
  ASSERT_TRUE(l.discarded(3, "zero_advantage"));
  ASSERT_TRUE(l.discarded(4, "stale"));
  ASSERT_TRUE(l.cancelled(7));
  ASSERT_TRUE(l.discarded(8, "generation_error"));  // a failed generation never was "generated"
  // 5 and 6 were generated and never finished: lost. 9 is still in flight.
  const SampleLedger::Summary s = l.summary();
  EXPECT_EQ(s.dispatched, 10);
  EXPECT_EQ(s.generated, 7);
  EXPECT_EQ(s.trained, 2);
  EXPECT_EQ(s.discarded.at("zero_advantage"), 2);
  EXPECT_EQ(s.discarded.at("stale"), 1);
  EXPECT_EQ(s.discarded.at("generation_error"), 1);
  EXPECT_EQ(s.discarded_total(), 4);
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_EQ(s.in_flight, 1);
  EXPECT_EQ(s.lost, 2);
  EXPECT_EQ(s.trained + s.discarded_total() + s.cancelled + s.in_flight + s.lost, s.dispatched);
  EXPECT_EQ(s.anomalies, 0);
}

TEST(SampleLedger, RefusedTransitionsChangeNothing) {
  SampleLedger l;
  ASSERT_TRUE(l.dispatched(1));
  EXPECT_FALSE(l.dispatched(1));        // twice
  EXPECT_FALSE(l.trained(1));           // not generated yet
  EXPECT_FALSE(l.generated(2));         // never dispatched
  ASSERT_TRUE(l.generated(1));
  EXPECT_FALSE(l.generated(1));         // a duplicate result
  EXPECT_FALSE(l.cancelled(1));         // no longer in flight
  ASSERT_TRUE(l.trained(1));
  EXPECT_FALSE(l.trained(1));           // trained twice
  EXPECT_FALSE(l.discarded(1, "late")); // already final
  const SampleLedger::Summary s = l.summary();
  EXPECT_EQ(s.trained, 1);
  EXPECT_EQ(s.generated, 1);
  EXPECT_EQ(s.discarded_total(), 0);
  EXPECT_EQ(s.anomalies, 7);
  EXPECT_EQ(l.state(1), SampleState::kFinished);
  EXPECT_FALSE(l.dispatched(1)) << "a finished id dispatched again";
  EXPECT_EQ(l.summary().anomalies, 8);
}

// A long run dispatches millions of samples (1.2 million in a 20-minute chaos soak): the ledger
// held a state for every one of them, and summary() (called every step) walked them all, so the
// orchestrator's memory and its time per step grew for as long as the run lasted. Only live
// samples are held now; the counts, and the refusal of a finished sample's transitions, stay.
TEST(SampleLedger, HoldsOnlyLiveSamples) {
  SampleLedger l;
  constexpr uint64_t kSamples = 100000;
  for (uint64_t id = 0; id < kSamples; ++id) {
    ASSERT_TRUE(l.dispatched(id));
    if (id % 4 == 3) {
      ASSERT_TRUE(l.cancelled(id));
      continue;
    }
    ASSERT_TRUE(l.generated(id));
    if (id % 4 == 0) {
      ASSERT_TRUE(l.trained(id));
    } else if (id % 4 == 1) {
      ASSERT_TRUE(l.discarded(id, "stale"));
    }
  }
  ASSERT_TRUE(l.dispatched(kSamples));  // one in flight
  EXPECT_EQ(l.held(), kSamples / 4 + 1) << "the generated ones (id % 4 == 2) and the one in flight";
  for (uint64_t id = 2; id < kSamples; id += 4) ASSERT_TRUE(l.discarded(id, "unused_at_exit"));
  EXPECT_EQ(l.held(), 1u);
  const SampleLedger::Summary s = l.summary();
  EXPECT_EQ(s.dispatched, static_cast<int64_t>(kSamples) + 1);
  EXPECT_EQ(s.trained, static_cast<int64_t>(kSamples) / 4);
  EXPECT_EQ(s.cancelled, static_cast<int64_t>(kSamples) / 4);
  EXPECT_EQ(s.discarded_total(), static_cast<int64_t>(kSamples) / 2);
  EXPECT_EQ(s.in_flight, 1);
  EXPECT_EQ(s.lost, 0);
  EXPECT_EQ(s.anomalies, 0);
  EXPECT_FALSE(l.trained(0)) << "trained twice";
  EXPECT_FALSE(l.generated(3)) << "a result for a cancelled sample";
  EXPECT_EQ(l.summary().anomalies, 2);
  EXPECT_EQ(l.state(5), SampleState::kFinished);
  EXPECT_EQ(l.state(kSamples), SampleState::kInFlight);
}

}  // namespace
}  // namespace rlrun::orchestrator
