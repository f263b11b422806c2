// CheckpointKeeper (run/training/checkpoint_keeper.h): every checkpoint_every-th step and the last
// one are saved by every trainer rank with the step's resume state; the newest saved checkpoint is
// what StepReplay keeps batches after and a restart goes back to; a rank that does not answer is
// hung; a save the trainers could not write stops the run or is recorded and skipped as chosen;
// an interrupt saves the last step unless it was just saved; the final model's folder is kept.
#include "orchestrator/run/training/checkpoint_keeper.h"

#include <gtest/gtest.h>

#include "tests/common/config_test_util.h"
#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using testing::PartEnv;

struct CheckpointKeeperTest : ::testing::Test {
  PartEnv env;
  rlrun::testing::TempDir dir;
  testing::FakeLauncher launcher;
  StepReplay replay;
  std::unique_ptr<TrainerGroup> trainers;
  CheckpointKeeperTest() {
    env.workers.insert(env.workers.begin() + 1, testing::worker(Role::kTrainer, 1));
    env.config.checkpoint_every = 2;
    env.config.number_of_steps = 5;
    env.config.train_step_timeout_seconds = 10;
    env.config.run_dir = dir.path();
    trainers = std::make_unique<TrainerGroup>(env.config, env.workers, launcher, *env.metrics, env.port.port(),
                                              TrainerGroup::Hooks{[](const Status& s) { return s; }});
  }
  CheckpointKeeper make() { return CheckpointKeeper(env.config, env.workers, *trainers, replay, env.port.port()); }
  static ResumeState state(int64_t step) {
    ResumeState s;
    s.steps_completed = step;
    return s;
  }
  // Every rank answers the SaveCheckpoints sent so far.
  void answer(CheckpointKeeper& k, bool ok = true) {
    for (const auto& sent : env.port.sent) {
      const SaveCheckpoint* save = sent.message.get<SaveCheckpoint>();
      if (save == nullptr) continue;
      const int rank = sent.peer == "trainer-0" ? 0 : 1;
      k.on_saved(rank, CheckpointSaved{save->step, ok, ok ? "" : "No space left on device",
                                       str(dir.path(), "/checkpoints/step-", save->step), 0.5});
    }
  }
};

TEST_F(CheckpointKeeperTest, EveryNthStepAndTheLastAreSavedByEveryRankWithTheStepsState) {
  CheckpointKeeper k = make();
  env.port.turn = [&] { answer(k); };
  k.step_completed(state(1));
  ASSERT_TRUE(k.save_if_due(true).ok());
  EXPECT_TRUE(env.port.sent.empty()) << "step 1: not due";
  k.step_completed(state(2));
  ASSERT_TRUE(k.save_if_due(true).ok());
  const std::vector<SaveCheckpoint> saves = env.port.sent_of<SaveCheckpoint>();
  ASSERT_EQ(saves.size(), 2u) << "both ranks";
  const std::string text(saves[0].orchestrator_state.begin(), saves[0].orchestrator_state.end());
  EXPECT_EQ(parse_resume_state(text, "test").value().steps_completed, 2);
  ASSERT_TRUE(k.newest().has_value());
  EXPECT_EQ(k.newest()->state.steps_completed, 2);
  EXPECT_EQ(k.newest()->dir, dir.path() + "/checkpoints/step-2");
  env.port.sent.clear();
  k.step_completed(state(5));
  ASSERT_TRUE(k.save_if_due(true).ok());
  EXPECT_EQ(env.port.sent_of<SaveCheckpoint>().size(), 2u) << "the last step";
  EXPECT_TRUE(k.save_at_interrupt(false).ok());
  EXPECT_EQ(env.port.sent_of<SaveCheckpoint>().size(), 2u) << "just saved: not again";
}

TEST_F(CheckpointKeeperTest, ARankThatDoesNotAnswerIsHung) {
  CheckpointKeeper k = make();
  env.port.turn = [&] {
    for (const auto& sent : env.port.sent)
      if (sent.peer == "trainer-0") k.on_saved(0, CheckpointSaved{2, true, "", "d", 0});
  };
  k.step_completed(state(2));
  const Status s = k.save_if_due(true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("trainer-1 did not finish the checkpoint of step 2 within 10 s"), std::string::npos)
      << s.message();
  EXPECT_TRUE(trainers->failed());
  EXPECT_FALSE(k.newest().has_value());
}

TEST_F(CheckpointKeeperTest, AnUnwrittenCheckpointStopsTheRunOrIsRecordedAsChosen) {
  CheckpointKeeper k = make();
  env.port.turn = [&] { answer(k, false); };
  k.step_completed(state(2));
  Status s = k.save_if_due(true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("checkpoint of step 2 not written: No space left on device; this run has no earlier "
                             "checkpoint"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("checkpoint_write_failure: continue"), std::string::npos);

  env.config.checkpoint_write_failure = CheckpointWriteFailure::kContinue;
  CheckpointKeeper going_on = make();
  env.port.turn = [&] { answer(going_on, false); };
  going_on.step_completed(state(4));
  ASSERT_TRUE(going_on.save_if_due(true).ok());
  ASSERT_EQ(going_on.stats().failures.size(), 1u);
  EXPECT_EQ(going_on.stats().failures[0].step, 4);
  EXPECT_FALSE(going_on.newest().has_value());
}

TEST_F(CheckpointKeeperTest, AResumedRunsCheckpointIsTheNewestAndARestartGoesBackToIt) {
  CheckpointKeeper k = make();
  k.resume_from(state(4), "/runs/r/checkpoints/step-000004");
  EXPECT_EQ(k.resumed()->steps_completed, 4);
  EXPECT_TRUE(k.save_at_interrupt(false).ok());
  EXPECT_TRUE(env.port.sent.empty()) << "nothing newer than the checkpoint to save";
  k.step_completed(state(5));
  k.rewind();
  EXPECT_TRUE(k.save_at_interrupt(false).ok());
  EXPECT_TRUE(env.port.sent.empty()) << "after a restart the last completed step is the checkpoint's";
}

TEST_F(CheckpointKeeperTest, TheFinalModelIsExportedByRankZero) {
  CheckpointKeeper k = make();
  env.port.turn = [&] { k.on_saved(0, CheckpointSaved{5, true, "", dir.path() + "/model", 1.0}); };
  k.export_model(5);
  const std::vector<SaveCheckpoint> sent = env.port.sent_of<SaveCheckpoint>("trainer-0");
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].model_only);
  EXPECT_EQ(k.stats().model_dir, dir.path() + "/model");
  EXPECT_EQ(env.port.dispatched_in_waits, std::vector<bool>{false});
}

}  // namespace
}  // namespace rlrun::orchestrator
