// CoreBalance (run/workers/core_balance.h): the idle side's cores go to the busy side, stay only when the
// steps got faster, are given back when the borrower waits or the lender gets busy without the
// steps staying faster, and a borderline loop does not flip every window.
#include "orchestrator/run/workers/core_balance.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using ::testing::HasSubstr;

constexpr CoreShare kOneEach{1, 1};

TEST(CoreBalance, ABusyTrainerBorrowsTheIdleRolloutCore) {
  // Issue 21's SmolLM2 loop: the trainer never waits, the rollout worker idles ~45% of the time.
  CoreBalance balance(kOneEach, 1, 1);
  const std::optional<CoreBalance::Change> change = balance.observe({0.03, 0.45, 20.0});
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->share, (CoreShare{2, 1}));
  EXPECT_EQ(balance.current(), (CoreShare{2, 1}));
  EXPECT_THAT(change->reason, HasSubstr("trainer idled 3%"));
  EXPECT_THAT(change->reason, HasSubstr("rollout workers 45%"));
  EXPECT_THAT(change->reason, HasSubstr("2 threads"));
}

TEST(CoreBalance, ABusyRolloutBorrowsTheWaitingTrainerCore) {
  CoreBalance balance(kOneEach, 1, 1);
  const std::optional<CoreBalance::Change> change = balance.observe({0.60, 0.02});
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->share, (CoreShare{1, 2}));
  EXPECT_THAT(change->reason, HasSubstr("each rollout worker takes 2 threads"));
}

TEST(CoreBalance, ABalancedOrMildlyIdleLoopKeepsItsShares) {
  // The quickstart: trainer idle ~25%, rollout ~13%: neither is the bottleneck enough.
  CoreBalance balance(kOneEach, 1, 1);
  EXPECT_FALSE(balance.observe({0.25, 0.13}).has_value());
  // A busy trainer, but too little idle rollout time to lend a core.
  EXPECT_FALSE(balance.observe({0.02, CoreBalance::kLendAt - 0.01}).has_value());
  // Both idle: nothing to gain.
  EXPECT_FALSE(balance.observe({0.5, 0.5}).has_value());
  EXPECT_EQ(balance.current(), kOneEach);
}

TEST(CoreBalance, SpareCoresAreSharedOutPerBorrowingProcess) {
  // Two trainer ranks and one rollout worker idling 45%: 0.225 cores per rank, none lent.
  CoreBalance two_ranks(kOneEach, 2, 1);
  EXPECT_FALSE(two_ranks.observe({0.0, 0.45}).has_value());
  // Four rollout workers with 2 threads each idling 60%: 4.8 idle cores for one trainer rank,
  // which takes 5 more threads (floor(4.8 + 1 - kLendAt)).
  CoreBalance many(CoreShare{2, 2}, 1, 4);
  const std::optional<CoreBalance::Change> change = many.observe({0.0, 0.60});
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->share, (CoreShare{7, 2}));
  // Exactly kLendAt idle cores lend one.
  CoreBalance at_threshold(kOneEach, 1, 1);
  ASSERT_TRUE(at_threshold.observe({0.0, CoreBalance::kLendAt}).has_value());
  EXPECT_EQ(at_threshold.current(), (CoreShare{2, 1}));
}

TEST(CoreBalance, TheCoresGoBackWhenTheBorrowerWaits) {
  CoreBalance balance(kOneEach, 1, 1);
  ASSERT_TRUE(balance.observe({0.0, 0.5, 20.0}).has_value());
  const std::optional<CoreBalance::Change> kept = balance.observe({0.02, 0.3, 18.0});  // the trial paid
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->share, (CoreShare{2, 1}));
  EXPECT_THAT(kept->reason, HasSubstr("lending pays (18 s/step with the borrowed threads, 20 before)"));
  // Still the bottleneck with the lender less idle than at the start (it shares its core now):
  // kept, inside the hysteresis band.
  EXPECT_FALSE(balance.observe({0.05, 0.25}).has_value());
  EXPECT_FALSE(balance.observe({0.20, 0.30}).has_value());
  const std::optional<CoreBalance::Change> back = balance.observe({0.40, 0.30});
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->share, kOneEach);
  EXPECT_EQ(balance.current(), kOneEach);
  EXPECT_THAT(back->reason, HasSubstr("the trainer idled 40%"));
  EXPECT_THAT(back->reason, HasSubstr("gives the borrowed threads back"));
}

TEST(CoreBalance, TheCoresGoBackWhenTheLenderGetsBusy) {
  CoreBalance balance(kOneEach, 1, 1);
  EXPECT_FALSE(balance.observe({0.0, 0.02}).has_value());  // both busy
  ASSERT_TRUE(balance.observe({0.5, 0.0, 1.0}).has_value());
  EXPECT_EQ(balance.current(), (CoreShare{1, 2}));
  ASSERT_TRUE(balance.observe({0.4, 0.0, 0.8}).has_value());  // the trial paid
  // The lender is busy now, but the steps are still faster than before the lend: kept.
  EXPECT_FALSE(balance.observe({0.10, 0.0, 0.9}).has_value());
  EXPECT_EQ(balance.current(), (CoreShare{1, 2}));
  // Busy and no faster: given back.
  const std::optional<CoreBalance::Change> back = balance.observe({0.10, 0.0, 0.99});
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->share, kOneEach);
  EXPECT_THAT(back->reason, HasSubstr("the trainer idled only 10%"));
  EXPECT_THAT(back->reason, HasSubstr("no faster than before the lend (0.99 s/step, 1 before)"));
  EXPECT_THAT(back->reason, HasSubstr("rollout workers give the borrowed threads back"));
}

TEST(CoreBalance, ABorderlineLoopDoesNotFlipEveryWindow) {
  // Lent at kLendAt, the lender's spare falls (it shares its core) but stays above kReturnBelow:
  // one change, not one per window.
  CoreBalance balance(kOneEach, 1, 1);
  int changes = 0;
  for (int window = 0; window < 20; ++window) {
    const CoreShare before = balance.current();
    const bool lent = before != kOneEach;  // and paying: 10% faster steps
    balance.observe({0.05, lent ? 0.2 : CoreBalance::kLendAt, lent ? 0.9 : 1.0});
    changes += balance.current() != before ? 1 : 0;
  }
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(balance.current(), (CoreShare{2, 1}));
}

TEST(CoreBalance, ALendThatDoesNotPayIsUndoneAndNotRetriedAtOnce) {
  // The tiny model's trainer: two threads sharing a core with the busy rollout worker are slower
  // than one of its own.
  CoreBalance balance(kOneEach, 1, 1);
  ASSERT_TRUE(balance.observe({0.02, 0.7, 0.150}).has_value());
  const std::optional<CoreBalance::Change> undone = balance.observe({0.02, 0.6, 0.188});
  ASSERT_TRUE(undone.has_value());
  EXPECT_EQ(undone->share, kOneEach);
  EXPECT_EQ(balance.current(), kOneEach);
  EXPECT_THAT(undone->reason, HasSubstr("lending did not pay (0.188 s/step with the borrowed threads, 0.15 before)"));
  // Barely faster is not faster: under kMinGain it is undone too.
  CoreBalance marginal(kOneEach, 1, 1);
  ASSERT_TRUE(marginal.observe({0.02, 0.7, 1.0}).has_value());
  ASSERT_TRUE(marginal.observe({0.02, 0.7, 1.0 - CoreBalance::kMinGain / 2}).has_value());
  EXPECT_EQ(marginal.current(), kOneEach);
  // The same loop is left alone for kRetryWindows windows, then tried again.
  for (int window = 0; window < CoreBalance::kRetryWindows; ++window)
    EXPECT_FALSE(balance.observe({0.02, 0.7, 0.150}).has_value()) << window;
  ASSERT_TRUE(balance.observe({0.02, 0.7, 0.150}).has_value());
  EXPECT_EQ(balance.current(), (CoreShare{2, 1}));
}

TEST(CoreBalance, AfterALendThatDidNotPayTheOtherWayStaysOpen) {
  // The quickstart: while most groups are discarded the rollout worker is the bottleneck, and its
  // second thread does not pay on so small a model; once rewards spread, the trainer is. Its lend
  // is not held back by the rollout's failed trial.
  CoreBalance balance(kOneEach, 1, 1);
  ASSERT_TRUE(balance.observe({0.48, 0.0, 0.155}).has_value());
  EXPECT_EQ(balance.current(), (CoreShare{1, 2}));
  ASSERT_TRUE(balance.observe({0.45, 0.0, 0.152}).has_value());  // not 3% faster: undone
  EXPECT_EQ(balance.current(), kOneEach);
  EXPECT_FALSE(balance.observe({0.48, 0.0, 0.155}).has_value());  // the rollouts wait their turn
  const std::optional<CoreBalance::Change> change = balance.observe({0.0, 0.40, 0.068});
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->share, (CoreShare{2, 1}));
  EXPECT_THAT(change->reason, HasSubstr("each trainer rank takes 2 threads"));
}

TEST(LoadWindows, StartAfterTheFirstStepSpanEnoughStepsAndSecondsAndLeaveOutKlScoring) {
  LoadWindows windows;
  // The first step only opens the first window.
  EXPECT_FALSE(windows.at_step_end({1, 10.0, 8.0, 1.0, 0.0}, 2, 1).has_value());
  // Too few steps, then too little time: the window goes on.
  EXPECT_FALSE(windows.at_step_end({2, 12.0, 8.5, 2.0, 0.0}, 2, 1).has_value());
  EXPECT_FALSE(windows.at_step_end({3, 10.0 + CoreBalance::kWindowSeconds / 2, 8.6, 2.1, 0.0}, 2, 1).has_value());
  // Steps 2-5 over 4 s: the trainer idled 1 s; two rollout workers idled 4 s together, of which
  // 0.8 CPU s on 2 threads each scoring the KL reference (0.4 s of their idle time).
  const std::optional<WindowLoad> load = windows.at_step_end({5, 14.0, 9.0, 5.0, 0.8}, 2, 2);
  ASSERT_TRUE(load.has_value());
  EXPECT_NEAR(load->trainer_idle, 0.25, 1e-12);
  EXPECT_NEAR(load->rollout_idle, (4.0 - 0.4) / (2 * 4.0), 1e-12);
  EXPECT_NEAR(load->seconds_per_step, 1.0, 1e-12);
  // The next window starts where that one ended.
  EXPECT_FALSE(windows.at_step_end({6, 20.0, 9.0, 5.0, 0.8}, 2, 2).has_value());
}

}  // namespace
}  // namespace rlrun::orchestrator
