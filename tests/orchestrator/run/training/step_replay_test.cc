// StepReplay: the batches a restarted trainer group trains again. Completed steps are kept until a
// checkpoint covers them; a restart redoes, in step order, the kept steps after the checkpoint,
// the step that was in training and what was still to redo; only samples never counted are
// untrained at the end; a checkpoint taken while redoing does not hold the later counted samples.
#include "orchestrator/run/training/step_replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using ::testing::ElementsAre;

StepRecord step(int64_t n) {
  StepRecord r;
  r.step = n;
  r.group_ids = {static_cast<uint64_t>(2 * n), static_cast<uint64_t>(2 * n + 1)};
  r.sample_ids = {static_cast<uint64_t>(10 * n), static_cast<uint64_t>(10 * n + 1)};
  return r;
}

void complete(StepReplay& replay, StepRecord r) {
  replay.begin(std::move(r));
  replay.completed();
}

TEST(StepReplay, KeepsCompletedStepsUntilACheckpointCoversThem) {
  StepReplay replay;
  for (int64_t n = 1; n <= 4; ++n) complete(replay, step(n));
  EXPECT_EQ(replay.kept(), 4u);
  replay.checkpointed(3);
  EXPECT_EQ(replay.kept(), 1u);
  EXPECT_EQ(replay.groups_untrained(), 0);
}

TEST(StepReplay, ARestartRedoesTheStepsAfterTheCheckpointInOrder) {
  StepReplay replay;
  for (int64_t n = 1; n <= 5; ++n) complete(replay, step(n));
  replay.checkpointed(3);
  replay.begin(step(6));  // in training when the trainer failed
  EXPECT_EQ(replay.groups_untrained(), 2);
  EXPECT_EQ(replay.rewind(3), 3);
  EXPECT_EQ(replay.in_progress(), nullptr);
  EXPECT_EQ(replay.groups_untrained(), 2) << "step 6's groups are still outstanding";
  EXPECT_EQ(replay.samples_counted_ahead(), 4) << "steps 4 and 5 were counted";

  std::optional<StepRecord> four = replay.take_redo();
  ASSERT_TRUE(four);
  EXPECT_EQ(four->step, 4);
  EXPECT_TRUE(four->counted);
  EXPECT_TRUE(four->redone);
  replay.begin(std::move(*four));
  replay.completed();
  EXPECT_EQ(replay.samples_counted_ahead(), 2) << "a checkpoint of step 4 does not hold step 5's";

  // A second failure while step 5 is redone: 4 (kept again), 5 and 6 are redone once more.
  std::optional<StepRecord> five = replay.take_redo();
  ASSERT_TRUE(five);
  replay.begin(std::move(*five));
  EXPECT_EQ(replay.rewind(3), 3);
  std::vector<int64_t> order;
  std::vector<bool> counted;
  while (std::optional<StepRecord> r = replay.take_redo()) {
    order.push_back(r->step);
    counted.push_back(r->counted);
  }
  EXPECT_THAT(order, ElementsAre(4, 5, 6));
  EXPECT_THAT(counted, ElementsAre(true, true, false)) << "step 6 never completed";
}

TEST(StepReplay, WithoutACheckpointEveryStepIsRedoneAndTheWarmStartIsKept) {
  StepReplay replay;
  replay.add_warm_start(BatchBuild{});
  replay.add_warm_start(BatchBuild{});
  complete(replay, step(1));
  complete(replay, step(2));
  EXPECT_EQ(replay.rewind(0), 2);
  EXPECT_EQ(replay.warm_start().size(), 2u);
  EXPECT_TRUE(replay.redoing());
}

TEST(StepReplay, SamplesOfBatchesNeverTrainedAreUntrained) {
  StepReplay replay;
  complete(replay, step(1));
  replay.begin(step(2));
  replay.rewind(0);
  EXPECT_THAT(replay.samples_untrained(), ElementsAre(20, 21)) << "step 1's are counted trained";
}

// checkpoint_every 0 kept every batch of the run in the orchestrator's memory. At most max_kept
// are kept: the oldest go, a restart from before them cannot redo (dropped_through), and
// forget_all hands back only the samples never counted trained. A checkpoint past the dropped
// steps makes redo possible again.
TEST(StepReplay, KeepsAtMostMaxKeptSteps) {
  StepReplay replay(3);
  for (int64_t n = 1; n <= 10; ++n) complete(replay, step(n));
  EXPECT_EQ(replay.kept(), 3u);
  EXPECT_EQ(replay.dropped_through(), 7);
  replay.begin(step(11));  // in training when the trainer failed
  const std::vector<uint64_t> untrained = replay.forget_all();
  EXPECT_THAT(untrained, ElementsAre(110, 111)) << "only step 11's samples were never counted";
  EXPECT_EQ(replay.kept(), 0u);
  EXPECT_EQ(replay.in_progress(), nullptr);
  EXPECT_FALSE(replay.redoing());
  EXPECT_EQ(replay.dropped_through(), 0);

  for (int64_t n = 1; n <= 5; ++n) complete(replay, step(n));
  EXPECT_EQ(replay.dropped_through(), 2);
  replay.checkpointed(4);
  EXPECT_EQ(replay.dropped_through(), 0) << "the checkpoint holds the dropped steps";
  EXPECT_EQ(replay.rewind(4), 1);
}

TEST(StepReplay, RewindBeforeDroppedStepsIsABug) {
  StepReplay replay(2);
  for (int64_t n = 1; n <= 4; ++n) complete(replay, step(n));
  EXPECT_DEATH(replay.rewind(0), "dropped");
}

}  // namespace
}  // namespace rlrun::orchestrator
