// WorkerSupervisor: a silent live worker (rollout or trainer) fails unless messages are unread; a
// replacement that does not register fails; restarts back off doubling and run out; a replacement
// joins the next weight group and knows its incarnation; a trainer is never restarted by itself.
#include "orchestrator/run/workers/supervisor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Act = WorkerSupervisor::Verdict::Act;
using Clock = WorkerSupervisor::Clock;
using std::chrono::seconds;

WorkerSupervisor supervisor() { return WorkerSupervisor(SupervisionPolicy{10, 300, 2, 300, 2}); }

WorkerSlot rollout(Clock::time_point last_heard) {
  WorkerSlot w;
  w.name = "rollout-0";
  w.role = Role::kRollout;
  w.state = WorkerState::kReady;
  w.registered = true;
  w.last_heard = last_heard;
  w.spec.name = w.name;
  w.spec.argv = {"rlrun", "rollout", "--weight-group-epoch", "0"};
  return w;
}

TEST(WorkerSupervisor, ASilentWorkerFailsUnlessMessagesAreUnread) {
  const WorkerSupervisor s = supervisor();
  const Clock::time_point t0 = Clock::now();
  WorkerSlot w = rollout(t0);
  EXPECT_EQ(s.judge(w, false, t0 + seconds(9)).act, Act::kNothing);
  const WorkerSupervisor::Verdict v = s.judge(w, false, t0 + seconds(11));
  EXPECT_EQ(v.act, Act::kFail);
  EXPECT_THAT(v.why, HasSubstr("silent for 11 s (heartbeat_timeout_seconds = 10)"));
  EXPECT_EQ(s.judge(w, true, t0 + seconds(11)).act, Act::kNothing) << "a heartbeat may be unread";
  w.registered = false;
  w.state = WorkerState::kStarting;
  EXPECT_EQ(s.judge(w, false, t0 + seconds(60)).act, Act::kNothing) << "not registered yet: nothing to hear";
}

// A trainer rank beats from its beacon thread through long steps: silence is a stopped or dead
// process. The verdict fails it; the orchestrator restarts the whole trainer group, never the rank.
TEST(WorkerSupervisor, ASilentTrainerFailsAndIsNeverRestartedAlone) {
  const WorkerSupervisor s = supervisor();
  const Clock::time_point t0 = Clock::now();
  WorkerSlot w = rollout(t0);
  w.role = Role::kTrainer;
  w.name = "trainer-0";
  EXPECT_EQ(s.judge(w, false, t0 + seconds(9)).act, Act::kNothing);
  EXPECT_EQ(s.judge(w, false, t0 + seconds(11)).act, Act::kFail);
  w.state = WorkerState::kDead;
  w.registered = false;
  EXPECT_EQ(s.judge(w, false, t0 + seconds(60)).act, Act::kNothing) << "the group restart starts it, not judge()";
}

// A member of a weight sync beats from its beacon thread while it waits in the collective, so a
// silent one is stopped or dead there too: it fails like any other (judge() knows nothing of syncs,
// on purpose: the exemption members in a sync had before commit 20d3fc4 let a stopped member hold
// the sync until its own timeouts). Its failure fails the round at once (release_work).
TEST(WorkerSupervisor, ASilentMemberOfAWeightSyncFailsLikeAnyOther) {
  const WorkerSupervisor s = supervisor();
  const Clock::time_point t0 = Clock::now();
  WorkerSlot w = rollout(t0);
  w.state = WorkerState::kNeedsWeights;  // registered, in the sync that gives it its first weights
  EXPECT_EQ(s.judge(w, false, t0 + seconds(9)).act, Act::kNothing);
  EXPECT_EQ(s.judge(w, false, t0 + seconds(11)).act, Act::kFail) << "silent in its first sync";
  w.state = WorkerState::kReady;  // a member of a later sync looks the same to the supervisor
  EXPECT_EQ(s.judge(w, false, t0 + seconds(11)).act, Act::kFail) << "silent in a later sync";
}

TEST(WorkerSupervisor, RestartsBackOffDoublingAndRunOut) {
  const WorkerSupervisor s = supervisor();
  const Clock::time_point t0 = Clock::now();
  WorkerSlot w = rollout(t0);
  EXPECT_EQ(s.on_failure(w, t0), std::optional<double>(2));
  EXPECT_EQ(w.state, WorkerState::kDead);
  EXPECT_EQ(s.judge(w, false, t0 + seconds(1)).act, Act::kNothing) << "backing off";
  w.awaiting_exit = true;
  EXPECT_EQ(s.judge(w, false, t0 + seconds(3)).act, Act::kNothing) << "its process is not gone yet";
  w.awaiting_exit = false;
  EXPECT_EQ(s.judge(w, false, t0 + seconds(3)).act, Act::kRestart);
  s.start_replacement(w, t0 + seconds(3));
  EXPECT_EQ(w.state, WorkerState::kStarting);
  EXPECT_EQ(s.on_failure(w, t0 + seconds(4)), std::optional<double>(4)) << "doubled";
  EXPECT_EQ(s.on_failure(w, t0 + seconds(9)), std::nullopt) << "max_restarts = 2 used up";
  EXPECT_EQ(w.restarts, 2);
}

TEST(WorkerSupervisor, AReplacementThatDoesNotRegisterFails) {
  const WorkerSupervisor s = supervisor();
  const Clock::time_point t0 = Clock::now();
  WorkerSlot w = rollout(t0);
  s.on_failure(w, t0);
  s.start_replacement(w, t0);
  EXPECT_EQ(s.judge(w, false, t0 + seconds(299)).act, Act::kNothing);
  const WorkerSupervisor::Verdict v = s.judge(w, false, t0 + seconds(301));
  EXPECT_EQ(v.act, Act::kFail);
  EXPECT_THAT(v.why, HasSubstr("did not register within 300 s"));
}

TEST(WorkerSupervisor, AReplacementJoinsTheNextWeightGroupAndKnowsItsIncarnation) {
  const WorkerSupervisor s = supervisor();
  WorkerSlot w = rollout(Clock::now());
  s.on_failure(w, Clock::now());
  const ProcessSpec first = s.start_replacement(w, Clock::now());
  EXPECT_THAT(first.argv, ElementsAre("rlrun", "rollout", "--weight-group-epoch", "-1", "--incarnation", "1"));
  w.spec = first;
  s.on_failure(w, Clock::now());
  EXPECT_THAT(s.start_replacement(w, Clock::now()).argv,
              ElementsAre("rlrun", "rollout", "--weight-group-epoch", "-1", "--incarnation", "2"));
}

TEST(TrainerRestart, EveryRankLoadsTheCheckpointFormsANewGradientGroupAndJoinsTheWeightsAtTheFirstSync) {
  ProcessSpec original;
  original.name = "trainer-1";
  original.argv = {"rlrun", "trainer", "--rank", "1", "--resume-from", "/run/checkpoints/step-000002"};
  EXPECT_THAT(trainer_restart_spec(original, "/run/checkpoints/step-000006", 1).argv,
              ElementsAre("rlrun", "trainer", "--rank", "1", "--resume-from", "/run/checkpoints/step-000006",
                          "--dp-group-epoch", "1", "--weight-group-epoch", "-1"));
  const ProcessSpec again = trainer_restart_spec(original, "", 2);
  EXPECT_THAT(again.argv, ElementsAre("rlrun", "trainer", "--rank", "1", "--dp-group-epoch", "2",
                                      "--weight-group-epoch", "-1"))
      << "no checkpoint yet: the start weights";
  EXPECT_THAT(trainer_restart_spec(again, "/c", 3).argv,
              ElementsAre("rlrun", "trainer", "--rank", "1", "--resume-from", "/c", "--dp-group-epoch", "3",
                          "--weight-group-epoch", "-1"))
      << "each flag replaced, never repeated";
  EXPECT_EQ(restart_backoff(0.5, 1, 300), 0.5);
  EXPECT_EQ(restart_backoff(0.5, 3, 300), 2.0);
}

// A soak's trainer group restarted a dozen times: the back-off doubled to minutes, then hours (the
// 20th restart of a 2 s back-off would wait 12 days; the 1000th overflowed to inf). It stops at
// restart_backoff_max_seconds, and a cap below the base never shortens the base.
TEST(RestartBackoff, StopsDoublingAtTheCap) {
  EXPECT_EQ(restart_backoff(2, 8, 300), 256.0);
  EXPECT_EQ(restart_backoff(2, 9, 300), 300.0);
  EXPECT_EQ(restart_backoff(2, 20, 300), 300.0);
  EXPECT_EQ(restart_backoff(2, 1000, 300), 300.0);
  EXPECT_EQ(restart_backoff(2, 5, 1), 2.0);
}

TEST(WorkerSupervisor, RestartBackoffIsCapped) {
  WorkerSupervisor supervisor(SupervisionPolicy{10, 300, 2, 5, 1000});
  WorkerSlot w;
  w.restarts = 30;
  const auto now = WorkerSupervisor::Clock::now();
  EXPECT_EQ(supervisor.on_failure(w, now), 5.0);
  EXPECT_EQ(w.restart_at, now + std::chrono::milliseconds(5000));
}

}  // namespace
}  // namespace rlrun::orchestrator
