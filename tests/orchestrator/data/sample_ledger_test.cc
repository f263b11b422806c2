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
  EXPECT_EQ(l.state(1), SampleState::kTrained);
}

}  // namespace
}  // namespace rlrun::orchestrator
