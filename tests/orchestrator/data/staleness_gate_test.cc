// The staleness gate: dispatch limits, stale discards and off-policy cancels, and a simulation
// of an asynchronous run in which no trained sample is older than the gate allows.
#include "orchestrator/data/staleness_gate.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>

namespace rlrun::orchestrator {
namespace {

TEST(StalenessGate, SynchronousAllowsOneBatchOutstanding) {
  StalenessGate gate({/*max_async_rollout=*/0, /*max_off_policy_steps=*/-1, /*batch_groups=*/4});
  EXPECT_TRUE(gate.may_dispatch(0));
  EXPECT_TRUE(gate.may_dispatch(3));
  EXPECT_FALSE(gate.may_dispatch(4));  // a whole batch outstanding: wait for the trainer
  EXPECT_EQ(gate.async_level(4), 1);
  EXPECT_EQ(gate.current_async_level(4), 0);  // the newest group out is for the next step
  EXPECT_EQ(gate.current_async_level(5), 1);
  EXPECT_EQ(gate.current_async_level(0), 0);
  EXPECT_FALSE(gate.too_stale(5, 5));
  EXPECT_TRUE(gate.too_stale(4, 5));
}

TEST(StalenessGate, AsyncLevelsAndCancels) {
  StalenessGate gate({2, 1, 3});
  EXPECT_TRUE(gate.may_dispatch(8));   // floor(8 / 3) = 2 <= 2
  EXPECT_FALSE(gate.may_dispatch(9));  // 3 > 2
  EXPECT_FALSE(gate.too_stale(3, 5));
  EXPECT_TRUE(gate.too_stale(2, 5));
  EXPECT_FALSE(gate.should_cancel(4, 5));
  EXPECT_TRUE(gate.should_cancel(3, 5));
  StalenessGate never({2, -1, 3});
  EXPECT_FALSE(never.should_cancel(0, 1000));
}

// A run in miniature: rollout finishes groups (in dispatch order, or in random order) sampled with
// the weights current at dispatch; the trainer takes batch_groups groups per step, discarding
// stale ones. Whatever the timing, no trained sample is older than max_async_rollout; when groups
// finish in order, the dispatch gate alone keeps every group fresh (nothing is discarded).
TEST(StalenessGate, SimulatedRunTrainsNothingOlderThanTheGateAllows) {
  for (int64_t max_async : {0, 1, 3})
  for (bool in_order : {true, false}) {
    const int64_t batch = 4;
    StalenessGate gate({max_async, -1, batch});
    std::mt19937 rng(static_cast<unsigned>(7 + max_async));
    int64_t trainer_step = 0, training = 0, discarded = 0;
    std::deque<int64_t> in_flight, ready;  // weight version of each group
    for (int tick = 0; tick < 5000; ++tick) {
      while (gate.may_dispatch(static_cast<int64_t>(in_flight.size() + ready.size()) + training))
        in_flight.push_back(trainer_step);
      if (!in_flight.empty() && rng() % 2 == 0) {  // a group finishes (out of order is fine)
        const size_t i = in_order ? 0 : rng() % in_flight.size();
        ready.push_back(in_flight[i]);
        in_flight.erase(in_flight.begin() + static_cast<long>(i));
      }
      if (training > 0 && rng() % 3 == 0) {  // the step and its weight sync finish
        ++trainer_step;
        training = 0;
      }
      if (training == 0 && static_cast<int64_t>(ready.size()) >= batch) {
        for (int64_t k = 0; k < batch; ++k) {
          const int64_t v = ready.front();
          ready.pop_front();
          if (gate.too_stale(static_cast<uint64_t>(v), trainer_step)) {
            ++discarded;
            continue;
          }
          ASSERT_LE(StalenessGate::staleness(static_cast<uint64_t>(v), trainer_step), max_async);
        }
        training = batch;
      }
    }
    EXPECT_GT(trainer_step, 100) << "max_async " << max_async;
    if (in_order) {
      EXPECT_EQ(discarded, 0) << "max_async " << max_async;
    }
    if (max_async == 0) {
      EXPECT_EQ(discarded, 0) << "synchronous: a batch is one version";
    }
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
