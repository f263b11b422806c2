// Rollout worker fault tolerance, end to end: the real `rlrun` binary on configs/tiny.yaml with two
// rollout workers, one of which is killed (SIGKILL at a random point of generation, or inside a
// weight sync through the fault double, fault_double_main.cc), stopped (SIGSTOP: a hung worker), or
// dies every time it starts. Each run must account for every sample (lost 0, no sample counted
// twice) and say in summary.json what was restarted.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "tests/common/test_seed.h"
#include "tests/orchestrator/run/summary_checks.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Fast detection and restarts, two rollout workers so that the run goes on while one is down.
// Every weight sync needs every worker, so no run ends before its failure was handled.
constexpr int kSteps = 60;
constexpr const char* kFaultSets =
    " --set inference_num_workers=2 --set number_of_steps=60 --set discard_group_zero_advantage=false"
    " --set heartbeat_interval_seconds=0.5 --set heartbeat_timeout_seconds=4 --set worker_restart_backoff_seconds=0.5";

// One `rlrun` run in the background (from the source folder: the config's relative paths).
class BackgroundRun {
 public:
  BackgroundRun(const fs::path& dir, const std::string& sets, const std::string& env = "") : dir_(dir) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A run with a planted fault uses the fault double (fault_double_main.cc): rlrun itself has none.
    const std::string binary = env.empty() ? RLRUN_BINARY : RLRUN_FAULT_DOUBLE;
    const std::string cmd = std::string("cd '") + RLRUN_SOURCE_DIR + "' && (" + env + " '" + binary +
                            "' configs/tiny.yaml --run-dir '" + (dir_ / "run").string() + "'" + kFaultSets + sets +
                            " > '" + (dir_ / "out").string() + "' 2>&1; echo $? > '" + (dir_ / "code").string() +
                            "') &";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string output() const { return read_file(dir_ / "out"); }
  fs::path run() const { return dir_ / "run"; }

  // Waits until the run trained `steps` steps (metrics.jsonl lines); false after `timeout`.
  bool wait_steps(int steps, std::chrono::seconds timeout = 60s) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(dir_ / "run" / "metrics.jsonl");
      std::string line;
      int n = 0;
      while (std::getline(in, line)) ++n;
      if (n >= steps) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  // The pid the orchestrator logged for `worker` at its first registration.
  int pid_of(const std::string& worker) const {
    const std::string out = output(), key = worker + " registered (pid ";
    const size_t at = out.find(key);
    return at == std::string::npos ? -1 : std::atoi(out.c_str() + at + key.size());
  }
  // The exit code, -1 after `timeout`.
  int wait_exit(std::chrono::seconds timeout = 90s) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (read_file(dir_ / "code").empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    const std::string code = read_file(dir_ / "code");
    return code.empty() ? -1 : std::atoi(code.c_str());
  }
  json summary() const { return json::parse(read_file(dir_ / "run" / "summary.json")); }

 private:
  fs::path dir_;
};

class WorkerFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("rlrun_fault_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);  // else kept to look at
  }
  fs::path dir_;
};

// The run went on past the failure: the replacement got the weights and then work.
void expect_one_recovery(const json& summary, const std::string& reason_part, const std::string& worker = "rollout-1") {
  EXPECT_EQ(summary["exit"], "ok") << summary.dump(2);
  EXPECT_EQ(summary["steps_completed"], kSteps);
  EXPECT_EQ(summary["worker_restarts"], 1) << summary.dump(2);
  ASSERT_EQ(summary["worker_failures"].size(), 1u) << summary.dump(2);
  const json& f = summary["worker_failures"][0];
  EXPECT_EQ(f["worker"], worker);
  EXPECT_NE(f["reason"].get<std::string>().find(reason_part), std::string::npos) << f.dump();
  ASSERT_TRUE(f["replacement_ready_at"].is_number()) << f.dump();
  EXPECT_GE(f["replacement_ready_at"].get<double>(), f["detected_at"].get<double>());
  testing::expect_every_sample_accounted_for(summary);
}

TEST_F(WorkerFaults, KilledDuringGenerationIsReplacedAndTheRunFinishes) {
  BackgroundRun run(dir_, "");
  // A random point of generation in the first third of the run (the two workers are generating the
  // next batch), counted in steps: a run on an idle machine takes ~20 ms a step, so a wait in
  // wall time could land after the last step, with no request left for the replacement.
  std::mt19937 rng(rlrun::testing::test_seed());
  ASSERT_TRUE(run.wait_steps(std::uniform_int_distribution<int>(1, kSteps / 3)(rng))) << run.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 10)(rng)));
  const int pid = run.pid_of("rollout-1");
  ASSERT_GT(pid, 0) << run.output();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(run.wait_exit(), 0) << run.output();
  const json summary = run.summary();
  expect_one_recovery(summary, "signal 9");
  EXPECT_TRUE(summary["worker_failures"][0]["replacement_first_request_at"].is_number()) << summary.dump(2);
  const std::string out = run.output();
  EXPECT_NE(out.find("rollout-1 killed by signal 9 (SIGKILL); restarting (1/3) in 0.5 s"), std::string::npos) << out;
  EXPECT_NE(out.find("re-forms the weight group as weights-1"), std::string::npos) << out;
}

TEST_F(WorkerFaults, KilledInsideAWeightSyncIsReplacedAndTheSyncRunsAgain) {
  // rollout-1 dies inside the sync of version 2 (after step 2), with the trainer broadcasting to it.
  BackgroundRun run(dir_, "", "RLRUN_FAULT_DOUBLE=rollout-1:weight_sync:2");
  ASSERT_EQ(run.wait_exit(), 0) << run.output();
  const json summary = run.summary();
  expect_one_recovery(summary, "signal 9");
  const std::string out = run.output();
  EXPECT_NE(out.find("weight sync of version 2 over weights-0 broke (a member died)"), std::string::npos) << out;
  EXPECT_NE(out.find("weight sync of version 2 re-forms the weight group as weights-1"), std::string::npos) << out;
  // The survivor's collective failed fast (the group's timeouts), it did not hang the sync.
  const std::string survivor = read_file(run.run() / "logs" / "rollout-0.log");
  EXPECT_NE(survivor.find("joined weight group epoch 1"), std::string::npos) << survivor;
}

TEST_F(WorkerFaults, HungWorkerIsKilledAndReplaced) {
  BackgroundRun run(dir_, "");
  ASSERT_TRUE(run.wait_steps(1)) << run.output();
  const int pid = run.pid_of("rollout-1");
  ASSERT_GT(pid, 0) << run.output();
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);  // alive but silent: only the heartbeat timeout can tell
  const int code = run.wait_exit();
  ::kill(pid, SIGKILL);  // in case the run did not (the assertions below then fail)
  ASSERT_EQ(code, 0) << run.output();
  const json summary = run.summary();
  // Silent in generation, or hung in a weight sync that the others left: either way a failure.
  const std::string reason = summary["worker_failures"].empty() ? "" : summary["worker_failures"][0].value("reason", "");
  EXPECT_TRUE(reason.find("silent for") != std::string::npos || reason.find("hung in the weight sync") != std::string::npos)
      << summary.dump(2);
  expect_one_recovery(summary, "");
}

// A member stopped (SIGSTOP) inside a weight sync: alive, silent, holding the sync. Its beacon
// thread is stopped with it, so heartbeat_timeout_seconds (4 s) finds it long before the sync's
// own bound (rollout_request_timeout_seconds, 60 s here): a member of a sync is judged by its
// silence like any other worker (before commit 20d3fc4 it was exempt).
TEST_F(WorkerFaults, StoppedInsideAWeightSyncIsFoundByItsSilence) {
  BackgroundRun run(dir_, " --set rollout_request_timeout_seconds=60",
                    "RLRUN_FAULT_DOUBLE=rollout-1:stop_in_weight_sync:2");
  const int code = run.wait_exit();
  const int pid = run.pid_of("rollout-1");
  if (pid > 0) ::kill(pid, SIGKILL);  // in case the run did not (the assertions below then fail)
  ASSERT_EQ(code, 0) << run.output();
  expect_one_recovery(run.summary(), "silent for");
  const std::string worker = read_file(run.run() / "logs" / "rollout-1.log");
  EXPECT_NE(worker.find("SIGSTOP inside the weight sync of version 2"), std::string::npos) << worker;
}

// A slow host: one engine step of rollout-1 takes 3x heartbeat_timeout_seconds (12 s). Its
// beacon thread keeps beating, so it is never taken for dead, and nothing is lost.
TEST_F(WorkerFaults, EngineStepLongerThanTheHeartbeatTimeoutIsNotDeath) {
  BackgroundRun run(dir_, " --set number_of_steps=6", "RLRUN_FAULT_DOUBLE=rollout-1:slow_step:12000");
  ASSERT_EQ(run.wait_exit(), 0) << run.output();
  const json summary = run.summary();
  EXPECT_EQ(summary["exit"], "ok") << summary.dump(2);
  EXPECT_EQ(summary["steps_completed"], 6);
  EXPECT_EQ(summary["worker_restarts"], 0) << summary.dump(2);
  EXPECT_TRUE(summary["worker_failures"].empty()) << summary.dump(2);
  testing::expect_every_sample_accounted_for(summary);
  const std::string worker = read_file(run.run() / "logs" / "rollout-1.log");
  EXPECT_NE(worker.find("engine step 2 takes 12000 ms longer"), std::string::npos) << worker;
  EXPECT_EQ(worker.find("nothing heard from the orchestrator"), std::string::npos) << worker;
}

// A hang with a long heartbeat timeout: the worker's oldest request passes
// rollout_request_timeout_seconds first. One rollout worker stops itself in the middle of its
// first request (the fault double), before any batch can form, so no weight sync is in flight
// (the requests of a worker blocked in a sync do not age: the sync's own bounds apply).
TEST_F(WorkerFaults, HungWorkerIsFoundByItsRequestTimeout) {
  BackgroundRun run(dir_, " --set inference_num_workers=1 --set heartbeat_timeout_seconds=30"
                          " --set rollout_request_timeout_seconds=2",
                    "RLRUN_FAULT_DOUBLE=rollout-0:stop_after_results:3");
  const int code = run.wait_exit();
  const int pid = run.pid_of("rollout-0");
  if (pid > 0) ::kill(pid, SIGKILL);  // in case the run did not (the assertions below then fail)
  ASSERT_EQ(code, 0) << run.output();
  expect_one_recovery(run.summary(), "unanswered for", "rollout-0");
}

TEST_F(WorkerFaults, WorkerThatKeepsDyingUsesUpItsRestartsAndStopsTheRunNamingIt) {
  BackgroundRun run(dir_, " --set max_worker_restarts=2 --set worker_restart_backoff_seconds=0.2",
                    "RLRUN_FAULT_DOUBLE=rollout-1:after_register");
  ASSERT_EQ(run.wait_exit(), 1) << run.output();
  const json summary = run.summary();
  const std::string exit = summary["exit"];
  EXPECT_NE(exit.find("rollout-1"), std::string::npos) << exit;
  EXPECT_NE(exit.find("max_worker_restarts = 2"), std::string::npos) << exit;
  EXPECT_NE(exit.find("logs/rollout-1.log"), std::string::npos) << exit;
  EXPECT_EQ(summary["worker_restarts"], 2);
  EXPECT_EQ(summary["worker_failures"].size(), 3u);
  EXPECT_EQ(summary["steps_completed"], 0);
  testing::expect_every_sample_accounted_for(summary);
  const std::string out = run.output();
  EXPECT_NE(out.find("restarting (1/2) in 0.2 s"), std::string::npos) << out;
  EXPECT_NE(out.find("restarting (2/2) in 0.4 s"), std::string::npos) << out;
}

// Without trainer restarts (trainer_recovery_test.cc has them) a hung trainer stops the run,
// naming it (train_step_timeout_seconds, or the weight sync it left the others waiting in), and
// summary.json is written.
TEST_F(WorkerFaults, HungTrainerWithoutRestartsStopsTheRunNamingIt) {
  BackgroundRun run(dir_, " --set number_of_steps=100000 --set train_step_timeout_seconds=3 --set max_trainer_restarts=0");
  ASSERT_TRUE(run.wait_steps(1)) << run.output();
  const int pid = run.pid_of("trainer-0");
  ASSERT_GT(pid, 0) << run.output();
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const int code = run.wait_exit();
  ::kill(pid, SIGKILL);
  ASSERT_EQ(code, 1) << run.output();
  const json summary = run.summary();
  const std::string exit = summary["exit"];
  EXPECT_NE(exit.find("logs/trainer-0.log"), std::string::npos) << exit;
  // Stopped (SIGSTOP stops its heartbeat thread too): silent, or past its step's timeout.
  EXPECT_TRUE(exit.find("train_step_timeout_seconds") != std::string::npos ||
              exit.find("trainer-0 did not finish") != std::string::npos ||
              exit.find("trainer-0 silent for") != std::string::npos)
      << exit;
  EXPECT_NE(exit.find("max_trainer_restarts = 0"), std::string::npos) << exit;
  EXPECT_EQ(summary["worker_restarts"], 0);
  EXPECT_EQ(summary["trainer_restarts"], 0);
  EXPECT_EQ(summary["trainer_failures"].size(), 1u);
  EXPECT_EQ(summary["samples"]["lost"], 0);
}

}  // namespace
}  // namespace rlrun::orchestrator
