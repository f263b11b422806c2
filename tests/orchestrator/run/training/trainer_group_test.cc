// TrainerGroup (run/training/trainer_group.h): a batch goes to every rank and the wait ends with
// every answer, or with the error a rank reported; a rank that lost its data-parallel group, or
// did not answer within train_step_timeout_seconds, is the group's failure (the first one found,
// kept until the restart takes it); a restart kills every rank, waits for the exits and the
// back-off, starts them loading the checkpoint and waits for their registration, and its record
// holds where the run was and when each part happened; past max_trainer_restarts the run stops.
#include "orchestrator/run/training/trainer_group.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using testing::PartEnv;

BatchBuild two_ranks() {
  BatchBuild build;
  for (uint32_t r = 0; r < 2; ++r) {
    TrainBatch b;
    b.step = 3;
    b.rank = r;
    build.per_rank.push_back(b);
  }
  return build;
}

struct TrainerGroupTest : ::testing::Test {
  PartEnv env;
  testing::FakeLauncher launcher;
  std::vector<Status> blamed;
  TrainerGroupTest() {
    env.workers.insert(env.workers.begin() + 1, testing::worker(Role::kTrainer, 1));
    env.config.train_step_timeout_seconds = 30;
    env.config.trainer_restart_backoff_seconds = 2;
    env.config.max_trainer_restarts = 1;
    for (WorkerSlot& w : env.workers)
      if (w.role == Role::kTrainer) w.spec.argv = {"rlrun", "trainer", "--rank", std::to_string(w.rank)};
  }
  TrainerGroup make() {
    return TrainerGroup(env.config, env.workers, launcher, *env.metrics, env.port.port(),
                        TrainerGroup::Hooks{[this](const Status& failure) {
                          blamed.push_back(failure);
                          return failure;
                        }});
  }
  static TrainResult result(uint32_t rank, double loss) {
    TrainResult r;
    r.rank = rank;
    r.metrics["loss"] = loss;
    return r;
  }
};

TEST_F(TrainerGroupTest, EveryRankGetsItsBatchAndTheWaitEndsWithEveryAnswer) {
  TrainerGroup group = make();
  env.port.turn = [&] {
    if (env.port.turns == 2) group.on_result(result(1, 0.5));
    if (env.port.turns == 4) group.on_result(result(0, 0.25));
  };
  ASSERT_TRUE(group.train(two_ranks(), "trainer step 3", true).ok());
  EXPECT_EQ(env.port.sent_of<TrainBatch>("trainer-0").size(), 1u);
  EXPECT_EQ(env.port.sent_of<TrainBatch>("trainer-1")[0].rank, 1u);
  EXPECT_EQ(env.port.turns, 4);
  EXPECT_EQ(group.rank0_metrics().at("loss"), 0.25);
  EXPECT_EQ(env.port.dispatched_in_waits, std::vector<bool>{true});
}

TEST_F(TrainerGroupTest, ARanksErrorEndsTheWaitAndALostGroupIsAFailureOfTheGroup) {
  TrainerGroup group = make();
  env.port.turn = [&] { group.on_error("trainer-1", ErrorReply{StatusCode::kInternal, 0, "out of memory"}); };
  const Status failed = group.train(two_ranks(), "trainer step 3", true);
  EXPECT_EQ(failed.message(), "trainer step 3 failed: trainer-1: out of memory");
  EXPECT_FALSE(group.failed()) << "an error of its own is not a failure of the group";

  env.port.turn = [&] { group.on_error("trainer-1", ErrorReply{StatusCode::kUnavailable, 0, "peer closed"}); };
  const Status lost = group.train(two_ranks(), "trainer step 3", true);
  ASSERT_EQ(blamed.size(), 1u) << "the peer's death, if the loop finds one, would be the cause";
  ASSERT_TRUE(group.failed());
  EXPECT_NE(lost.message().find("trainer-1 lost its data-parallel group in trainer step 3"), std::string::npos)
      << lost.message();
  EXPECT_NE(lost.message().find("see its log: /logs/trainer-1.log"), std::string::npos);
}

TEST_F(TrainerGroupTest, ARankThatDoesNotAnswerInTimeIsHungAndTheFirstFailureIsKept) {
  TrainerGroup group = make();
  env.port.turn = [&] {
    if (env.port.turns == 1) group.on_result(result(1, 0.5));
  };
  const Status hung = group.train(two_ranks(), "trainer step 3", true);
  ASSERT_TRUE(group.failed());
  EXPECT_NE(hung.message().find("trainer-0 did not finish trainer step 3 within 30 s"), std::string::npos) << hung.message();
  EXPECT_GE(env.port.turns * testing::FakePort::kTurn.count(), 30000);
  (void)group.note_failure(env.workers[1], "exited with code 1");
  EXPECT_EQ(group.failure().message(), hung.message()) << "the first one found is the one acted on";
}

TEST_F(TrainerGroupTest, ARestartKillsWaitsAndStartsEveryRankFromTheCheckpoint) {
  TrainerGroup group = make();
  (void)group.note_failure(env.workers[0], "exited with code 1");
  env.workers[0].state = WorkerState::kDead;  // its exit was seen
  Result<TrainerGroup::Restart> restart = group.begin_restart("/run/checkpoints/step-000004", 4, 6);
  ASSERT_TRUE(restart.ok()) << restart.status().message();
  EXPECT_FALSE(group.failed()) << "taken";
  EXPECT_EQ(launcher.killed, std::vector<std::string>{"trainer-1"}) << "the survivor goes too";
  EXPECT_EQ(restart->backoff_seconds, 2);

  const auto killed_at = env.port.now;
  env.port.turn = [&] {
    for (WorkerSlot& w : env.workers) w.awaiting_exit = false;  // the exits come
    if (!launcher.started.empty())
      for (WorkerSlot& w : env.workers) w.registered = true;
  };
  ASSERT_TRUE(group.relaunch(*restart, false).ok());
  EXPECT_GE(env.port.now - killed_at, std::chrono::seconds(2)) << "not before the back-off";
  ASSERT_EQ(launcher.started.size(), 2u);
  const std::vector<std::string>& argv = launcher.started[0].argv;
  EXPECT_NE(std::find(argv.begin(), argv.end(), "/run/checkpoints/step-000004"), argv.end());
  EXPECT_EQ(env.workers[0].restarts, 1);

  group.restored(*restart, 2, 0);
  group.step_completed();
  const TrainerGroup::Stats::Failure& f = group.stats().failures.at(0);
  EXPECT_EQ(f.worker, "trainer-0");
  EXPECT_EQ(f.step, 6);
  EXPECT_EQ(f.restored_step, 4);
  EXPECT_EQ(f.steps_redone, 2);
  EXPECT_GT(f.restart_started_at, f.detected_at);
  EXPECT_GT(f.first_step_at, 0);
  EXPECT_EQ(group.stats().restarts, 1);
}

TEST_F(TrainerGroupTest, PastMaxTrainerRestartsTheRunStopsNamingTheRanksLog) {
  TrainerGroup group = make();
  (void)group.note_failure(env.workers[0], "exited with code 1");
  ASSERT_TRUE(group.begin_restart("", 0, 1).ok());
  (void)group.note_failure(env.workers[1], "silent for 12 s");
  Result<TrainerGroup::Restart> again = group.begin_restart("", 0, 1);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("max_trainer_restarts = 1 used up; see its log: /logs/trainer-1.log"),
            std::string::npos)
      << again.status().message();
  EXPECT_EQ(group.stats().failures.size(), 2u) << "the last failure is recorded too";
}

TEST_F(TrainerGroupTest, ARankThatDoesNotRegisterAfterItsRestartIsAFailure) {
  TrainerGroup group = make();
  (void)group.note_failure(env.workers[0], "exited with code 1");
  Result<TrainerGroup::Restart> restart = group.begin_restart("", 0, 0);
  env.port.turn = [&] {
    for (WorkerSlot& w : env.workers) w.awaiting_exit = false;
  };
  const Status s = group.relaunch(*restart, false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("did not register within 300 s of its restart"), std::string::npos) << s.message();
  EXPECT_TRUE(group.failed());
}

}  // namespace
}  // namespace rlrun::orchestrator
