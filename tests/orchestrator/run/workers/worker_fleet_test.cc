// WorkerFleet (run/workers/worker_fleet.h): only the run's workers register; a dead worker's
// messages are dropped; heartbeats are echoed and their peaks kept; a rollout worker that exits
// or falls silent is failed (its work handed back, the failure recorded with its times) and
// restarted after its back-off, until its restarts are used up; a trainer rank's exit or silence
// goes to the trainer group; after shutdown exits are expected.
#include "orchestrator/run/workers/worker_fleet.h"

#include <gtest/gtest.h>

#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using testing::PartEnv;

struct WorkerFleetTest : ::testing::Test {
  PartEnv env;
  testing::FakeLauncher launcher;
  std::vector<int> released;
  std::vector<std::string> trainer_failures;

  WorkerFleet make(int max_restarts = 2) {
    for (WorkerSlot& w : env.workers) w.last_heard = env.port.now;
    SupervisionPolicy policy;
    policy.heartbeat_timeout_seconds = 10;
    policy.restart_backoff_seconds = 1;
    policy.max_restarts = max_restarts;
    return WorkerFleet(env.workers, policy, launcher, *env.metrics, env.port.port(),
                       WorkerFleet::Hooks{[this](int w) { released.push_back(w); },
                                          [this](const WorkerSlot& w, const std::string& why) {
                                            trainer_failures.push_back(w.name + " " + why);
                                            return unavailable(w.name + " " + why);
                                          }});
  }
  static Incoming incoming(const std::string& peer, Payload payload, uint64_t correlation = 7) {
    return Incoming{peer, Message{correlation, std::move(payload)}};
  }
};

TEST_F(WorkerFleetTest, OnlyTheRunsWorkersRegisterAndADeadWorkersMessagesAreDropped) {
  env.workers[1].state = WorkerState::kStarting;
  env.workers[1].registered = false;
  WorkerFleet fleet = make();
  Register reg;
  reg.role = Role::kRollout;
  reg.rank = 0;
  Result<WorkerSlot*> admitted = fleet.on_register(incoming("rollout-0", reg), reg);
  ASSERT_TRUE(admitted.ok());
  ASSERT_NE(*admitted, nullptr);
  EXPECT_EQ((*admitted)->state, WorkerState::kNeedsWeights) << "registered: it needs weights now";
  ASSERT_EQ(env.port.sent_of<RegisterAck>("rollout-0").size(), 1u);
  EXPECT_EQ(env.port.sent[0].message.correlation_id, 7u);

  reg.rank = 5;
  Result<WorkerSlot*> stranger = fleet.on_register(incoming("rollout-5", reg), reg);
  ASSERT_TRUE(stranger.ok());
  EXPECT_EQ(*stranger, nullptr);
  ASSERT_EQ(env.port.sent_of<ErrorReply>("rollout-5").size(), 1u);

  fleet.slots()[2].state = WorkerState::kDead;
  EXPECT_FALSE(fleet.heard("rollout-1")) << "sent before it died";
  env.port.advance(std::chrono::seconds(3));
  EXPECT_TRUE(fleet.heard("trainer-0"));
  EXPECT_EQ(fleet.slots()[0].last_heard, env.port.now);
  EXPECT_TRUE(fleet.heard("a-tool")) << "not a worker: the message is handled all the same";
}

TEST_F(WorkerFleetTest, HeartbeatsAreEchoedAndEveryProcesssPeaksKept) {
  WorkerFleet fleet = make();
  Heartbeat hb;
  hb.peak_memory_bytes = 500;
  fleet.on_heartbeat(incoming("rollout-0", hb, 11), hb);
  ASSERT_EQ(env.port.sent_of<Heartbeat>("rollout-0").size(), 1u);
  EXPECT_EQ(env.port.sent.back().message.correlation_id, 11u);
  hb.peak_memory_bytes = 300;
  fleet.on_heartbeat(incoming("rollout-0", hb), hb);
  TrainResult tr;
  tr.metrics = {{"memory_optimizer_rss_peak_bytes", 900}, {"memory_forward_backward_backend_peak_bytes", 40}};
  fleet.on_train_result("trainer-0", tr);
  EXPECT_EQ(fleet.stats().peak_memory_bytes.at("rollout-0"), 500);
  EXPECT_EQ(fleet.stats().peak_memory_bytes.at("trainer-0"), 900);
  EXPECT_EQ(fleet.stats().phase_peak_bytes.at("trainer-0").at("forward_backward"), 40);
}

TEST_F(WorkerFleetTest, AnExitedRolloutWorkerIsFailedAndRestartedAfterItsBackOff) {
  WorkerFleet fleet = make();
  launcher.exits.push_back(ProcessExit{"rollout-1", 0, 9});
  ASSERT_TRUE(fleet.take_exits().ok());
  EXPECT_EQ(released, std::vector<int>{2}) << "its work goes back first";
  EXPECT_TRUE(launcher.killed.empty()) << "it exited: nothing to kill";
  ASSERT_EQ(fleet.stats().failures.size(), 1u);
  EXPECT_EQ(fleet.stats().failures[0].reason, "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(fleet.stats().failures[0].detected_at, env.port.unix_now);
  EXPECT_EQ(fleet.stats().restarts, 1);
  EXPECT_EQ(fleet.slots()[2].state, WorkerState::kDead);

  ASSERT_TRUE(fleet.judge(false, false).ok());
  EXPECT_TRUE(launcher.started.empty()) << "not before the back-off";
  env.port.advance(std::chrono::milliseconds(1100));
  ASSERT_TRUE(fleet.judge(false, false).ok());
  ASSERT_EQ(launcher.started.size(), 1u);
  EXPECT_EQ(launcher.started[0].name, "rollout-1");
  EXPECT_EQ(fleet.slots()[2].state, WorkerState::kStarting);
  EXPECT_GT(fleet.stats().failures[0].replacement_started_at, 0);

  fleet.slots()[2].state = WorkerState::kNeedsWeights;  // registered
  fleet.weights_synced(4);
  EXPECT_EQ(fleet.slots()[2].state, WorkerState::kReady);
  EXPECT_GT(fleet.stats().failures[0].replacement_ready_at, 0);
  fleet.on_request_sent(2);
  const double first = fleet.stats().failures[0].replacement_first_request_at;
  EXPECT_GT(first, 0);
  env.port.advance(std::chrono::seconds(1));
  fleet.on_request_sent(2);
  EXPECT_EQ(fleet.stats().failures[0].replacement_first_request_at, first) << "the first request only";
}

TEST_F(WorkerFleetTest, ASilentWorkerIsKilledAndOneWhoseRestartsAreUsedUpStopsTheRun) {
  WorkerFleet fleet = make(/*max_restarts=*/0);
  env.port.advance(std::chrono::seconds(11));
  fleet.slots()[0].last_heard = env.port.now;  // the trainer spoke
  const Status s = fleet.judge(false, false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(launcher.killed, std::vector<std::string>{"rollout-0"});
  EXPECT_NE(s.message().find("rollout worker rollout-0 silent for"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("max_worker_restarts = 0 used up; see its log: /logs/rollout-0.log"), std::string::npos)
      << s.message();
  EXPECT_TRUE(fleet.judge(true, false).ok()) << "messages left unread: silence is not judged";
}

TEST_F(WorkerFleetTest, ATrainerRanksExitOrSilenceGoesToTheTrainerGroup) {
  WorkerFleet fleet = make();
  launcher.exits.push_back(ProcessExit{"trainer-0", 3, 0});
  ASSERT_TRUE(fleet.take_exits().ok()) << "the other exits of the poll are handled too";
  ASSERT_EQ(trainer_failures.size(), 1u);
  EXPECT_EQ(trainer_failures[0], "trainer-0 exited with code 3");
  EXPECT_EQ(fleet.slots()[0].state, WorkerState::kDead);
  EXPECT_TRUE(released.empty()) << "a trainer's work is the trainer group's";

  WorkerFleet other = make();
  env.port.advance(std::chrono::seconds(11));
  for (size_t i = 1; i < other.slots().size(); ++i) other.slots()[i].last_heard = env.port.now;
  EXPECT_TRUE(other.judge(false, /*hold_trainer_failures=*/true).ok()) << "an evaluation runs";
  EXPECT_FALSE(other.judge(false, false).ok());
}

TEST_F(WorkerFleetTest, AfterShutdownExitsAreExpected) {
  WorkerFleet fleet = make();
  fleet.shutdown("run finished");
  EXPECT_EQ(env.port.sent_of<Shutdown>().size(), 3u);
  launcher.exits.push_back(ProcessExit{"rollout-0", 0, 0});
  ASSERT_TRUE(fleet.take_exits().ok());
  EXPECT_TRUE(released.empty());
  EXPECT_TRUE(fleet.stats().failures.empty());
}

}  // namespace
}  // namespace rlrun::orchestrator
