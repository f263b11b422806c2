// How `rlrun CONFIG` stops before its last step, on the quickstart's task: a policy that never
// earns a reward ends the run after max_zero_spread_rounds instead of waiting forever, so do
// prompts that never fit, and a run stopped by SIGTERM still measures the held-out accuracy
// summary.json promises. A policy that earned rewards and then none goes on, named as a collapse.
// Workers killed while the stopped run evaluates (scancel) end it at once, the accuracy named as
// not measured.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/eventually.h"
#include "tests/orchestrator/cli_test_util.h"
#include "tests/orchestrator/reward/reward_server_process.h"

namespace rlrun::orchestrator {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string quickstart() { return std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml"; }

// Waits up to `limit` for `pid`; kills it and returns false when it does not end.
bool wait_for_exit(pid_t pid, int* status, std::chrono::seconds limit) {
  if (testing::eventually([&] { return ::waitpid(pid, status, WNOHANG) == pid; }, limit)) return true;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, status, 0);
  return false;
}

int lines_in(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// A quickstart run without warm-start and with `set` that cannot form a batch: waited for (it must
// end by itself), it fails; returns its output and fills `summary`.
std::string run_without_batches(const std::string& set, json& summary) {
  testing::TempDir dir;
  const std::string run = dir.path() + "/run", log = dir.path() + "/rlrun.log";
  const pid_t pid = testing::spawn_in(dir.path(),
                                      {RLRUN_BINARY, quickstart(), "--run-dir", run, "--set", "metrics_bind=127.0.0.1:0",
                                       "--set", "format_warm_start_steps=0", "--set", set},
                                      log);
  EXPECT_GT(pid, 0);
  int status = 0;
  EXPECT_TRUE(wait_for_exit(pid, &status, std::chrono::seconds(120)))
      << "the run waited for a batch that cannot form:\n" << testing::read_all(log);
  const std::string output = testing::read_all(log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << output;
  summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_NE(summary["exit"].get<std::string>().find("no batch can form"), std::string::npos) << summary.dump(2);
  EXPECT_EQ(summary["steps_completed"], 0);
  return output;
}

TEST(RunStop, NoBatchCanFormStopsAfterTheBoundWithTheReason) {
  // No warm-start: the random model never answers right, so every group has zero reward spread.
  json summary;
  const std::string output = run_without_batches("max_zero_spread_rounds=3", summary);
  // 3 batches of 8 groups: at least 24 in a row (a group that finishes with the 24th may count too).
  std::smatch in_a_row;
  ASSERT_TRUE(std::regex_search(output, in_a_row, std::regex("([0-9]+) groups in a row earned no reward"))) << output;
  EXPECT_GE(std::stoi(in_a_row[1].str()), 24) << output;
  EXPECT_NE(output.find("max_zero_spread_rounds = 3"), std::string::npos) << output;
  EXPECT_EQ(summary["samples"]["lost"], 0);
  EXPECT_TRUE(summary["eval"]["accuracy_after"].is_number()) << summary.dump(2);
}

// The quickstart without warm-start, rewarded by the reward server double in its `collapse` mode:
// its first `rewarded` samples every other one, every later one nothing. Returns the run's stderr.
std::string run_with_collapsing_rewards(int rewarded, int steps, json& summary) {
  auto server = testing::RewardServerProcess::start("tests/reference/faulty_reward_server.py",
                                                    {"--mode", "collapse", "--count", std::to_string(rewarded)});
  EXPECT_TRUE(server->ok()) << server->log();
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  const testing::CliRun r = testing::run_rlrun(
      dir, str("'", quickstart(), "' --run-dir '", run, "' --set metrics_bind=127.0.0.1:0 --set format_warm_start_steps=0 ",
               "--set task.reward=http --set task.reward_url=", server->url(), " --set kl_coef=0 ",
               "--set max_zero_spread_rounds=1 --set number_of_steps=", steps, " --set task.eval_every=0"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  summary = json::parse(testing::read_all(run + "/summary.json"));
  return r.err;
}

TEST(RunStop, ARewardCollapseIsNamedWithWhatPreventsIt) {
  // A policy that unlearns: about 15 steps of 64 samples rewarded every other one, then nothing.
  json summary;
  const std::string err = run_with_collapsing_rewards(960, 20, summary);
  EXPECT_NE(err.find("earlier steps trained on rewarded samples (mean reward up to 0.5"), std::string::npos) << err;
  EXPECT_NE(err.find("set kl_coef"), std::string::npos) << err;
  EXPECT_GE(summary["reward_collapse_step"].get<int64_t>(), 11) << summary.dump(2);
  EXPECT_LE(summary["reward_collapse_step"].get<int64_t>(), 20) << summary.dump(2);
  EXPECT_EQ(summary["steps_completed"], 20);
}

// A drought right after the start, before the run ever earned much, is a policy that rarely
// succeeds yet (the quickstart's first steps), not a collapse.
TEST(RunStop, AnEarlyDroughtIsNotACollapse) {
  json summary;
  const std::string err = run_with_collapsing_rewards(64, 4, summary);
  EXPECT_NE(err.find("Few groups teach anything"), std::string::npos) << err;
  EXPECT_EQ(err.find("may have lost what it could do"), std::string::npos) << err;
  EXPECT_TRUE(summary["reward_collapse_step"].is_null()) << summary.dump(2);
}

TEST(RunStop, PromptsThatNeverFitStopTheRunNamingTheKeys) {
  // "reverse abc:" is a dozen tokens: none fits in 4. The run must not wait for a batch forever.
  json summary;
  const std::string output = run_without_batches("max_prompt_tokens=4", summary);
  EXPECT_NE(output.find("prompts in a row were skipped"), std::string::npos) << output;
  EXPECT_NE(output.find("max_prompt_tokens = 4"), std::string::npos) << output;
}

// Starts the quickstart in `dir` (warm-started, every group trained, no periodic evaluation) with
// `extra` settings, and waits until it has completed 3 steps; -1 (a failure, the run ended) when
// it did not.
pid_t start_quickstart_until_step_3(const testing::TempDir& dir, const std::string& run, const std::string& log,
                                    const std::vector<std::string>& extra) {
  std::vector<std::string> args = {RLRUN_BINARY, quickstart(), "--run-dir", run, "--set", "metrics_bind=127.0.0.1:0",
                                   "--set", "format_warm_start_steps=10", "--set", "discard_group_zero_advantage=false",
                                   "--set", "task.eval_every=0"};
  for (const std::string& e : extra) args.insert(args.end(), {"--set", e});
  const pid_t pid = testing::spawn_in(dir.path(), args, log);
  EXPECT_GT(pid, 0);
  if (pid <= 0) return -1;
  testing::eventually([&] { return lines_in(run + "/metrics.jsonl") >= 3 || ::waitpid(pid, nullptr, WNOHANG) == pid; },
                      std::chrono::seconds(180), std::chrono::milliseconds(50));
  if (lines_in(run + "/metrics.jsonl") >= 3) return pid;
  ADD_FAILURE() << "the run did not complete 3 steps:\n" << testing::read_all(log);
  ::kill(pid, SIGKILL);  // when it still runs
  ::waitpid(pid, nullptr, 0);
  return -1;
}

TEST(RunStop, SigtermStillMeasuresHeldOutAccuracy) {
  // Also when every batch is ready before the trainer asks: the stop must not need a wait.
  testing::TempDir dir;
  const std::string run = dir.path() + "/run", log = dir.path() + "/rlrun.log";
  // rollout runs far ahead: the trainer finds its batch ready, a step without a wait
  const pid_t pid = start_quickstart_until_step_3(dir, run, log, {"max_async_rollout=4"});
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_TRUE(wait_for_exit(pid, &status, std::chrono::seconds(60))) << testing::read_all(log);
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["exit"], "interrupted");
  EXPECT_LT(summary["steps_completed"].get<int64_t>(), 350);
  EXPECT_TRUE(summary["eval"]["accuracy_after"].is_number()) << summary.dump(2);
  EXPECT_NE(summary["eval"].value("accuracy_after_note", "").find("interrupted"), std::string::npos)
      << summary.dump(2);
  EXPECT_EQ(summary["samples"]["lost"], 0);
}

// The pids of `pid`'s children (the local launcher's workers).
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t child; in >> child;) out.push_back(child);
  return out;
}

TEST(RunStop, WorkersKilledDuringTheEvaluationAtTheStopEndTheRunAtOnce) {
  // What scancel, or a kill of every process of the run, does: the workers die while the stopped
  // run measures its held-out accuracy. Nothing holds the trained weights any more, so that
  // evaluation cannot finish; the run must end now, not after rollout_request_timeout_seconds.
  testing::TempDir dir;
  const std::string run = dir.path() + "/run", log = dir.path() + "/rlrun.log";
  // an evaluation long enough (seconds) to be in progress when the workers die
  const pid_t pid =
      start_quickstart_until_step_3(dir, run, log, {"task.eval_size=16384", "rollout_request_timeout_seconds=300"});
  ASSERT_GT(pid, 0);
  const std::vector<pid_t> workers = children_of(pid);
  ASSERT_EQ(workers.size(), 2u) << "expected a trainer and a rollout worker";
  ::kill(pid, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (pid_t w : workers) ::kill(w, SIGKILL);
  int status = 0;
  ASSERT_TRUE(wait_for_exit(pid, &status, std::chrono::seconds(60)))
      << "the stopped run waited for workers that were gone:\n" << testing::read_all(log);
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_NE(summary["exit"].get<std::string>().find("interrupted"), std::string::npos) << summary.dump(2);
  EXPECT_TRUE(summary["eval"]["accuracy_after"].is_null()) << summary.dump(2);
  EXPECT_NE(summary["eval"].value("accuracy_after_note", "").find("not measured"), std::string::npos)
      << summary.dump(2);
}

}  // namespace
}  // namespace rlrun::orchestrator
