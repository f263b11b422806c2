// WeightSyncDriver (run/training/weight_sync_driver.h): a round starts only when every worker is
// alive, goes to trainer-0 and every rollout worker, and ends when each answered; a death breaks
// it and the next round re-forms the group; a receiver that does not answer after the sender is
// hung, and so is a sender past train_step_timeout_seconds; a failure with every member alive is
// held, then stops the run; a replacement catches up between steps, never during one.
#include "orchestrator/run/training/weight_sync_driver.h"

#include <gtest/gtest.h>

#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using testing::PartEnv;

struct WeightSyncDriverTest : ::testing::Test {
  PartEnv env;
  std::vector<std::pair<int, std::string>> failed_workers;
  std::vector<std::string> trainer_failures;
  std::vector<uint32_t> abandoned;
  std::vector<uint64_t> synced;
  bool training = false;
  WeightSyncDriverTest() {
    env.config.rollout_request_timeout_seconds = 5;
    env.config.train_step_timeout_seconds = 30;
    env.config.heartbeat_timeout_seconds = 2;
  }
  WeightSyncDriver make() {
    return WeightSyncDriver(
        env.config, env.workers, *env.metrics, 1000, env.port.port(),
        WeightSyncDriver::Hooks{[this](int w, const std::string& why) {
                                  failed_workers.push_back({w, why});
                                  return Status();
                                },
                                [this](const WorkerSlot& w, const std::string& why) {
                                  trainer_failures.push_back(w.name + " " + why);
                                  return unavailable(why);
                                },
                                [this](uint32_t epoch) { abandoned.push_back(epoch); },
                                [this] { return training; }, [this](uint64_t v) { synced.push_back(v); }});
  }
  // Every member that got WeightSyncBegin of `version` since `from` answers ok.
  void answer_all(WeightSyncDriver& d, size_t from = 0) {
    for (size_t i = from; i < env.port.sent.size(); ++i)
      if (env.port.sent[i].message.get<WeightSyncBegin>() != nullptr) d.on_end(env.port.sent[i].peer, WeightSyncEnd{});
  }
};

TEST_F(WeightSyncDriverTest, ARoundGoesToTheSenderAndEveryRolloutWorkerAndEndsWithTheirAnswers) {
  WeightSyncDriver d = make();
  env.port.turn = [&] {
    ASSERT_TRUE(d.advance().ok());
    answer_all(d);
  };
  ASSERT_TRUE(d.sync(3, true).ok());
  const std::vector<WeightSyncBegin> begins = env.port.sent_of<WeightSyncBegin>();
  ASSERT_EQ(begins.size(), 3u) << "trainer-0 and two rollout workers";
  EXPECT_EQ(begins[0].version, 3u);
  EXPECT_EQ(begins[0].group_epoch, 0u);
  EXPECT_EQ(synced, std::vector<uint64_t>{3});
  EXPECT_GT(d.last_seconds(), 0);
}

TEST_F(WeightSyncDriverTest, ADeadMemberBreaksTheRoundAndTheNextOneReformsTheGroup) {
  WeightSyncDriver d = make();
  env.port.turn = [&] {
    ASSERT_TRUE(d.advance().ok());
    if (env.port.turns == 1) {  // rollout-1 dies mid-round; its replacement registers later
      env.workers[2].state = WorkerState::kDead;
      d.member_died("rollout-1");
    }
    if (env.port.turns == 5) env.workers[2].state = WorkerState::kNeedsWeights;
    if (env.port.turns > 1) answer_all(d);
  };
  ASSERT_TRUE(d.sync(1, true).ok());
  EXPECT_EQ(abandoned, std::vector<uint32_t>{0}) << "the joiners of weights-0 are freed";
  const std::vector<WeightSyncBegin> begins = env.port.sent_of<WeightSyncBegin>("trainer-0");
  ASSERT_EQ(begins.size(), 2u);
  EXPECT_EQ(begins[1].group_epoch, 1u) << "a new epoch";
  EXPECT_EQ(synced, std::vector<uint64_t>{1});
}

TEST_F(WeightSyncDriverTest, AReceiverThatDoesNotAnswerAfterTheSenderIsHungAndSoIsASlowSender) {
  WeightSyncDriver d = make();
  env.port.loop = [&] { return d.advance(); };
  env.port.turn = [&] {
    if (env.port.turns == 1) {
      d.on_end("trainer-0", WeightSyncEnd{});
      d.on_end("rollout-0", WeightSyncEnd{});
    }
    if (!failed_workers.empty()) {  // the fleet kills it: the round fails for a death, and is retried
      env.workers[2].state = WorkerState::kDead;
      d.member_died("rollout-1");
      env.workers[2].state = WorkerState::kReady;
      env.port.turn = [&] {
        (void)d.advance();
        answer_all(d);
      };
    }
  };
  const auto start = env.port.now;
  ASSERT_TRUE(d.sync(2, true).ok());
  ASSERT_EQ(failed_workers.size(), 1u);
  EXPECT_EQ(failed_workers[0].first, 2) << "rollout-1";
  EXPECT_NE(failed_workers[0].second.find("hung in the weight sync of version 2"), std::string::npos);
  EXPECT_GT(env.port.now - start, std::chrono::seconds(5)) << "rollout_request_timeout_seconds after the sender";

  WeightSyncDriver slow = make();
  env.port.loop = [&] { return slow.advance(); };
  env.port.turn = nullptr;
  const Status s = slow.sync(3, true);
  EXPECT_FALSE(s.ok());
  ASSERT_EQ(trainer_failures.size(), 1u);
  EXPECT_NE(trainer_failures[0].find("trainer-0 did not finish the weight sync of version 3 within 30 s"),
            std::string::npos);
}

TEST_F(WeightSyncDriverTest, AFailureWithEveryMemberAliveIsHeldThenStopsTheRun) {
  WeightSyncDriver d = make();
  env.port.loop = [&] { return d.advance(); };
  env.port.turn = [&] {
    if (env.port.turns != 1) return;
    WeightSyncEnd failed;
    failed.ok = false;
    failed.error = "gloo: connection reset";
    d.on_end("trainer-0", failed);
    d.on_end("rollout-0", WeightSyncEnd{});
    d.on_end("rollout-1", WeightSyncEnd{});
  };
  const auto start = env.port.now;
  const Status s = d.sync(2, true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("weight sync of version 2 failed: trainer-0: gloo: connection reset"), std::string::npos)
      << s.message();
  EXPECT_GE(env.port.now - start, std::chrono::seconds(3))
      << "held for heartbeat_timeout_seconds + 1: a member found dead meanwhile would explain it";
}

TEST_F(WeightSyncDriverTest, AReplacementCatchesUpBetweenStepsAndNotDuringARestore) {
  WeightSyncDriver d = make();
  env.port.turn = [&] {
    ASSERT_TRUE(d.advance().ok());
    answer_all(d);
  };
  ASSERT_TRUE(d.sync(4, true).ok());
  env.workers[1].state = WorkerState::kNeedsWeights;  // a replacement registered
  training = true;
  const size_t before = env.port.sent.size();
  ASSERT_TRUE(d.advance().ok());
  EXPECT_EQ(env.port.sent.size(), before) << "a step is in training: its own sync includes it";
  training = false;
  d.sender_lost();
  ASSERT_TRUE(d.advance().ok());
  EXPECT_EQ(env.port.sent.size(), before) << "the trainer group restores: the restored weights' sync includes it";
  d.restored();
  ASSERT_TRUE(d.advance().ok());
  const std::vector<WeightSyncBegin> begins = env.port.sent_of<WeightSyncBegin>("rollout-0");
  ASSERT_EQ(begins.size(), 2u);
  EXPECT_EQ(begins[1].version, 4u) << "the current version";
}

}  // namespace
}  // namespace rlrun::orchestrator
