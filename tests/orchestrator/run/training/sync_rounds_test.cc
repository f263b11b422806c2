// SyncRounds: a round ends well only when every member answered ok; a death fails it for a retry
// and makes the next round re-form the group under a new epoch; an error with every member alive
// is the run's error; answers of old rounds are ignored.
#include "orchestrator/run/training/sync_rounds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = SyncRounds::Clock;

const std::set<std::string> kMembers = {"trainer-0", "rollout-0", "rollout-1"};

TEST(SyncRounds, ARoundEndsWellWhenEveryMemberAnsweredOk) {
  SyncRounds s;
  s.want(3);
  EXPECT_TRUE(s.started());
  const auto t0 = Clock::now();
  const SyncRounds::Round& r = s.begin(3, kMembers, t0);
  EXPECT_EQ(r.epoch, 0u);
  EXPECT_FALSE(r.reformed);
  s.on_end("rollout-0", true, "", t0);
  s.on_end("trainer-0", true, "", t0 + std::chrono::seconds(1));
  EXPECT_EQ(s.round()->sender_answered_at, t0 + std::chrono::seconds(1));
  EXPECT_FALSE(s.answered());
  EXPECT_TRUE(s.waits_for("rollout-1"));
  s.on_end("rollout-1", true, "", t0);
  ASSERT_TRUE(s.answered());
  const SyncRounds::Outcome o = s.finish();
  EXPECT_TRUE(o.ok);
  EXPECT_EQ(s.synced_version(), 3u);
  EXPECT_FALSE(s.target().has_value()) << "the version waited for is reached";
  EXPECT_EQ(s.round(), nullptr);
}

TEST(SyncRounds, ADeathFailsTheRoundForARetryUnderANewEpoch) {
  SyncRounds s;
  s.want(1);
  s.begin(1, kMembers, Clock::now());
  s.on_end("trainer-0", true, "", Clock::now());
  EXPECT_EQ(s.member_died("rollout-1"), std::optional<uint32_t>(0)) << "the epoch whose rendezvous to abandon";
  EXPECT_FALSE(s.waits_for("rollout-1"));
  s.on_end("rollout-0", false, "peer closed the connection", Clock::now());
  ASSERT_TRUE(s.answered());
  const SyncRounds::Outcome o = s.finish();
  EXPECT_FALSE(o.ok);
  EXPECT_TRUE(o.retry);
  EXPECT_TRUE(o.errors.empty()) << "a death is retried, not reported";
  EXPECT_EQ(s.target(), std::optional<uint64_t>(1)) << "still waited for";
  const SyncRounds::Round& again = s.begin(1, kMembers, Clock::now());
  EXPECT_EQ(again.epoch, 1u);
  EXPECT_TRUE(again.reformed);
  for (const std::string& m : kMembers) s.on_end(m, true, "", Clock::now());
  EXPECT_TRUE(s.finish().ok);
  EXPECT_FALSE(s.begin(2, kMembers, Clock::now()).reformed) << "a whole group is kept";
  EXPECT_EQ(s.epoch(), 1u);
}

// A trainer restart: the sender is gone; the receivers still get the usual bound to answer, and
// the version once wanted is dropped for the restored one.
TEST(SyncRounds, TheSendersDeathCountsAsItsAnswerAndItsTargetCanBeForgotten) {
  SyncRounds s;
  s.want(7);
  const auto t0 = Clock::now();
  s.begin(7, kMembers, t0);
  EXPECT_EQ(s.member_died("trainer-0", t0 + std::chrono::seconds(2)), std::optional<uint32_t>(0));
  EXPECT_EQ(s.round()->sender_answered_at, t0 + std::chrono::seconds(2));
  s.forget_target();
  EXPECT_FALSE(s.target().has_value());
  s.on_end("rollout-0", false, "peer closed the connection", t0);
  s.on_end("rollout-1", false, "peer closed the connection", t0);
  const SyncRounds::Outcome o = s.finish();
  EXPECT_TRUE(o.retry);
  s.want(3);
  const SyncRounds::Round& restored = s.begin(3, kMembers, t0);
  EXPECT_TRUE(restored.reformed);
  EXPECT_EQ(restored.version, 3u) << "a weight version may go back";
}

TEST(SyncRounds, AnErrorWithEveryMemberAliveIsTheRunsError) {
  SyncRounds s;
  s.want(5);
  const auto t0 = Clock::now();
  s.begin(5, kMembers, t0);
  s.not_delivered("trainer-0", "no route", t0);
  EXPECT_EQ(s.round()->sender_answered_at, t0) << "the sender is not coming: receivers are timed from now";
  s.on_end("rollout-0", false, "layout mismatch", t0);
  s.on_end("rollout-1", true, "", t0);
  const SyncRounds::Outcome o = s.finish();
  EXPECT_FALSE(o.ok);
  EXPECT_FALSE(o.retry);
  EXPECT_THAT(o.errors, ElementsAre(HasSubstr("trainer-0: WeightSyncBegin not delivered: no route"),
                                    "rollout-0: layout mismatch"));
  EXPECT_EQ(s.synced_version(), 0u);
  EXPECT_TRUE(s.begin(5, kMembers, t0).reformed) << "a failed collective leaves the group out of step";
}

// rollout-1 stopped (SIGSTOP) after it answered but before its last acknowledgement left: the
// sender's collective fails first, its silence is noticed later. Held, the failure is dropped by
// the member's death within the grace; one no death explains counts when the grace is over.
TEST(SyncRounds, AHeldFailureIsExplainedByAMembersDeathOrCountsAfterItsGrace) {
  SyncRounds s;
  s.want(2);
  const auto t0 = Clock::now();
  s.begin(2, kMembers, t0);
  s.on_end("rollout-0", true, "", t0);
  s.on_end("rollout-1", true, "", t0);
  s.on_end("trainer-0", false, "rank(s) 2 did not acknowledge broadcast 7", t0);
  SyncRounds::Outcome o = s.finish();
  ASSERT_FALSE(o.ok || o.retry);
  EXPECT_EQ(o.members, kMembers);
  const auto until = t0 + std::chrono::seconds(5);
  s.hold(o, until);
  EXPECT_TRUE(s.holding());
  EXPECT_FALSE(s.expired_hold(until - std::chrono::milliseconds(1)).has_value());
  s.member_died("a stranger");
  EXPECT_TRUE(s.holding()) << "only a member of the failed round explains it";
  s.member_died("rollout-1");
  EXPECT_FALSE(s.holding());
  EXPECT_FALSE(s.expired_hold(until).has_value());
  EXPECT_EQ(s.target(), 2u) << "the version is still wanted: the round runs again";
  EXPECT_TRUE(s.begin(2, kMembers, until).reformed);

  s.on_end("trainer-0", false, "layout mismatch", until);
  s.on_end("rollout-0", true, "", until);
  s.on_end("rollout-1", true, "", until);
  s.hold(s.finish(), until + std::chrono::seconds(5));
  const std::optional<SyncRounds::Outcome> counted = s.expired_hold(until + std::chrono::seconds(5));
  ASSERT_TRUE(counted.has_value());
  EXPECT_THAT(counted->errors, ElementsAre("trainer-0: layout mismatch"));
  EXPECT_FALSE(s.holding());
}

TEST(SyncRounds, AnswersOfOldRoundsAndStrangersAreIgnored) {
  SyncRounds s;
  s.on_end("rollout-0", false, "late", Clock::now());  // no round at all
  EXPECT_EQ(s.member_died("rollout-0"), std::nullopt);  // between rounds: the next re-forms the group
  EXPECT_EQ(s.begin(1, {"trainer-0", "rollout-0"}, Clock::now()).epoch, 1u);
  s.on_end("rollout-7", false, "not a member", Clock::now());
  s.on_end("rollout-0", true, "", Clock::now());
  s.on_end("rollout-0", false, "a second answer", Clock::now());
  s.on_end("trainer-0", true, "", Clock::now());
  EXPECT_TRUE(s.finish().ok) << "the stranger and the second answer changed nothing";
}

}  // namespace
}  // namespace rlrun::orchestrator
