// ZeroSpreadPolicy (run/samples/zero_spread.h): groups without a reward spread are discarded up to
// max_zero_spread_rounds batches, then fill the waiting step's batch; a policy that never earned a
// reward stops the run; a drought after rewarded steps is named a collapse once, and advice()
// builds its message without changing anything.
#include "orchestrator/run/samples/zero_spread.h"

#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using Verdict = ZeroSpreadPolicy::Verdict;

ZeroSpreadOptions options(int64_t max_rounds, int64_t batch_groups = 2) {
  ZeroSpreadOptions o;
  o.discard = true;
  o.max_rounds = max_rounds;
  o.batch_groups = batch_groups;
  o.group_size = 4;
  o.learning_rate = 1e-5;
  return o;
}

const std::vector<float> kFailed{0, 0, 0, 0}, kSolved{1, 1, 1, 1}, kSpread{1, 0, 0, 1};

TEST(ZeroSpreadPolicy, GroupsWithASpreadTrainAndDiscardingOffTrainsEverything) {
  const std::vector<double> means;
  ZeroSpreadPolicy policy(options(1));
  EXPECT_EQ(policy.on_group(kSpread, {1, false, means}), Verdict::kTrain);
  ZeroSpreadOptions off = options(1);
  off.discard = false;
  ZeroSpreadPolicy keep_all(off);
  EXPECT_EQ(keep_all.on_group(kFailed, {1, false, means}), Verdict::kTrain);
  EXPECT_EQ(keep_all.stats().kept, 0) << "kept counts groups trained past the bound only";
}

TEST(ZeroSpreadPolicy, PastTheBoundSuchGroupsFillTheBatchUntilItIsTaken) {
  const std::vector<double> means;
  ZeroSpreadPolicy policy(options(1, 2));  // bound: 1 batch of 2 groups
  EXPECT_EQ(policy.on_group(kSpread, {1, false, means}), Verdict::kTrain) << "a rewarded sample: the run can learn";
  EXPECT_EQ(policy.on_group(kFailed, {1, false, means}), Verdict::kDiscard);
  EXPECT_EQ(policy.on_group(kSolved, {1, false, means}), Verdict::kDiscard) << "the bound is reached: still discarded";
  EXPECT_EQ(policy.on_group(kFailed, {1, false, means}), Verdict::kTrain) << "past the bound: kept";
  EXPECT_EQ(policy.on_group(kSolved, {1, false, means}), Verdict::kTrain);
  EXPECT_EQ(policy.stats().kept, 2);
  policy.batch_taken();
  EXPECT_EQ(policy.on_group(kFailed, {2, false, means}), Verdict::kDiscard) << "the next step's wait starts afresh";
  EXPECT_TRUE(policy.stop_reason().empty());
}

TEST(ZeroSpreadPolicy, APolicyThatNeverEarnedARewardStopsTheRunSayingWhatToDo) {
  const std::vector<double> means;
  ZeroSpreadPolicy policy(options(1, 2));
  EXPECT_EQ(policy.on_group(kFailed, {1, false, means}), Verdict::kDiscard);
  EXPECT_EQ(policy.on_group(kFailed, {1, false, means}), Verdict::kStop);
  EXPECT_NE(policy.stop_reason().find("the policy never succeeds"), std::string::npos) << policy.stop_reason();
  EXPECT_NE(policy.stop_reason().find("discard_group_zero_advantage: false"), std::string::npos);

  ZeroSpreadPolicy waiting(options(1, 2));
  waiting.on_group(kFailed, {1, true, means});
  EXPECT_EQ(waiting.on_group(kFailed, {1, true, means}), Verdict::kDiscard)
      << "scored groups wait for a batch: it can form, so the step keeps what comes";
  EXPECT_EQ(waiting.on_group(kFailed, {1, true, means}), Verdict::kTrain);
  EXPECT_TRUE(waiting.stop_reason().empty());
}

TEST(ZeroSpreadPolicy, NoBoundDiscardsForever) {
  const std::vector<double> means;
  ZeroSpreadPolicy policy(options(0, 1));
  policy.on_group(kSpread, {1, false, means});
  for (int i = 0; i < 50; ++i) ASSERT_EQ(policy.on_group(kFailed, {1, false, means}), Verdict::kDiscard);
  EXPECT_EQ(policy.stats().kept, 0);
}

// Ten steps trained on rewarded samples, half of the samples rewarded, then nothing at all.
TEST(ZeroSpreadPolicy, ADroughtAfterRewardedStepsIsACollapseNamedOnceAndAdviceChangesNothing) {
  const std::vector<double> means(12, 0.5);
  ZeroSpreadPolicy policy(options(1, 2));
  for (int i = 0; i < 20; ++i) ASSERT_EQ(policy.on_group(kSpread, {13, false, means}), Verdict::kTrain);
  policy.on_group(kFailed, {13, false, means});
  policy.on_group(kFailed, {13, false, means});
  const ZeroSpreadPolicy::Run run{13, false, means};
  const std::string advice = policy.advice(run);
  EXPECT_NE(advice.find("may have lost what it could do"), std::string::npos) << advice;
  EXPECT_NE(advice.find("set kl_coef"), std::string::npos) << advice;
  EXPECT_NE(advice.find("(mean reward up to 0.5, step 1)"), std::string::npos) << advice;
  EXPECT_EQ(policy.stats().reward_collapse_step, 13);
  EXPECT_EQ(policy.advice(run), advice) << "advice() builds a message; it records nothing";
  policy.batch_taken();
  policy.on_group(kFailed, {14, false, means});
  policy.on_group(kFailed, {14, false, means});
  EXPECT_EQ(policy.stats().reward_collapse_step, 13) << "the first step that suspected it";
}

TEST(ZeroSpreadPolicy, AnEarlyDroughtOrASolvedTaskIsNotACollapse) {
  const std::vector<double> few(3, 0.5);
  ZeroSpreadPolicy early(options(1, 2));
  for (int i = 0; i < 20; ++i) early.on_group(kSpread, {4, false, few});
  early.on_group(kFailed, {4, false, few});
  early.on_group(kFailed, {4, false, few});
  EXPECT_NE(early.advice({4, false, few}).find("Few groups teach anything"), std::string::npos);
  EXPECT_EQ(early.stats().reward_collapse_step, 0);

  const std::vector<double> many(12, 0.5);
  ZeroSpreadPolicy learned(options(1, 2));
  for (int i = 0; i < 20; ++i) learned.on_group(kSpread, {13, false, many});
  learned.on_group(kSolved, {13, false, many});
  learned.on_group(kSolved, {13, false, many});
  EXPECT_NE(learned.advice({13, false, many}).find("the task is learned"), std::string::npos);
  EXPECT_EQ(learned.stats().reward_collapse_step, 0);
}

}  // namespace
}  // namespace rlrun::orchestrator
