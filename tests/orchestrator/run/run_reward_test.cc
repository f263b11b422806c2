// task.reward in a real run: local verifiers and the http term, scored by a reward server that
// runs as a real process (examples/reward_server.py, or the test double
// tests/reference/faulty_reward_server.py). A server that fails for a while loses no sample; one
// that never recovers stops the run with an error naming its URL, and summary.json still accounts
// for every sample. The last test is the short CI version of configs/smollm2-arithmetic.yaml on
// the real SmolLM2-135M-Instruct, its reward computed by the example server.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "common/observe/log.h"
#include "tests/orchestrator/cli_test_util.h"
#include "tests/orchestrator/run/summary_checks.h"
#include "tests/orchestrator/reward/reward_server_process.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::RewardServerProcess;

struct RewardRun {
  testing::CliRun cli;
  json summary;
  std::vector<json> steps;  // metrics.jsonl
};

// configs/tiny.yaml (a random 2-layer model on one-digit arithmetic) with `sets`, in `dir`.
RewardRun run_tiny(const testing::TempDir& dir, const std::string& sets) {
  const std::string run = dir.path() + "/run";
  RewardRun r;
  r.cli = testing::run_rlrun(dir, str("'", RLRUN_SOURCE_DIR, "/configs/tiny.yaml' --run-dir '", run,
                                      "' --set discard_group_zero_advantage=false --set heartbeat_timeout_seconds=60 ",
                                      sets));
  if (fs::exists(run + "/summary.json")) r.summary = json::parse(testing::read_all(run + "/summary.json"));
  std::istringstream lines(testing::read_all(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) r.steps.push_back(json::parse(line));
  return r;
}

TEST(RunReward, LocalTermsAndTheHttpTermScoreEverySample) {
  auto server = RewardServerProcess::start("examples/reward_server.py", {});
  ASSERT_TRUE(server->ok()) << server->log();
  testing::TempDir dir;
  const RewardRun r = run_tiny(dir, str("--set 'task.reward=numeric + 0.5*http - 0.1*length' --set task.reward_url=",
                                        server->url()));
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  EXPECT_NE(r.cli.err.find("rewards: numeric + 0.5*http - 0.1*length, the http term from " + server->url()),
            std::string::npos)
      << r.cli.err;
  EXPECT_EQ(r.summary["steps_completed"], 3);
  testing::expect_every_sample_accounted_for(r.summary);
  const json& reward = r.summary["reward"];
  EXPECT_EQ(reward["expression"], "numeric + 0.5*http - 0.1*length");
  EXPECT_EQ(reward["server"]["url"], server->url());
  EXPECT_EQ(reward["server"]["failed_requests"], 0);
  // every trained sample was scored by the server (trained ones come from complete groups)
  EXPECT_GE(reward["server"]["samples_scored"].get<int64_t>(), r.summary["samples"]["trained"].get<int64_t>());
  EXPECT_GT(reward["server"]["round_trip_median_seconds"].get<double>(), 0.0);
  ASSERT_EQ(r.steps.size(), 3u);
  // Each step line has the means of the samples scored since the previous one (a step may have
  // none of a kind): every term and the server's extra_logs show up, and the example server's
  // reward is numeric correctness, as the numeric term scores it.
  std::set<std::string> terms, logs;
  for (const json& step : r.steps) {
    for (const auto& [name, _] : step["reward_terms"].items()) terms.insert(name);
    if (!step.contains("reward_server_logs")) continue;
    for (const auto& [name, _] : step["reward_server_logs"].items()) logs.insert(name);
    EXPECT_DOUBLE_EQ(step["reward_terms"]["http"].get<double>(), step["reward_server_logs"]["correct"].get<double>());
  }
  EXPECT_EQ(terms, (std::set<std::string>{"http", "length", "numeric"}));
  EXPECT_EQ(logs, (std::set<std::string>{"correct", "has_number"}));
}

TEST(RunReward, AServerThatFailsForAWhileLosesNoSample) {
  // HTTP 500 for its first 3 requests, then right: the samples wait and are retried
  auto server = RewardServerProcess::start("tests/reference/faulty_reward_server.py", {"--mode", "http500", "--count", "3"});
  ASSERT_TRUE(server->ok()) << server->log();
  testing::TempDir dir;
  const RewardRun r = run_tiny(dir, str("--set task.reward=http --set task.reward_url=", server->url()));
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  EXPECT_EQ(r.summary["steps_completed"], 3);
  testing::expect_every_sample_accounted_for(r.summary);
  EXPECT_EQ(r.summary["reward"]["server"]["failed_requests"], 3) << r.summary.dump(2);
  EXPECT_GT(r.summary["reward"]["server"]["samples_retried"].get<int64_t>(), 0);
}

TEST(RunReward, AServerThatNeverAnswersStopsTheRunNamingItAndLosesNothing) {
  auto server = RewardServerProcess::start("tests/reference/faulty_reward_server.py", {"--mode", "garbage", "--count", "-1"});
  ASSERT_TRUE(server->ok()) << server->log();
  testing::TempDir dir;
  const RewardRun r = run_tiny(dir, str("--set task.reward=http --set task.reward_max_failures=3 --set task.reward_url=",
                                        server->url()));
  ASSERT_NE(r.cli.exit_code, 0) << r.cli.err;
  EXPECT_NE(r.cli.err.find("the reward server stopped answering (task.reward_url " + server->url()), std::string::npos)
      << r.cli.err;
  EXPECT_NE(r.cli.err.find("not JSON"), std::string::npos) << r.cli.err;  // what came back
  ASSERT_TRUE(r.summary.is_object()) << r.cli.err;
  EXPECT_NE(r.summary["exit"], "ok");
  testing::expect_every_sample_accounted_for(r.summary);
  EXPECT_GT(r.summary["samples"]["discarded"].value("reward_unavailable", 0), 0) << r.summary.dump(2);
  EXPECT_EQ(r.summary["reward"]["server"]["failed_requests"], 3);
}

// samples.jsonl: what the policy says at every evaluation and every log_samples_every-th step;
// logs/orchestrator.log: every step's progress line, while stderr (not a terminal) gets fewer.
TEST(RunReward, SamplesJsonlAndTheLogFileShowEveryStep) {
  testing::TempDir dir;
  const RewardRun r = run_tiny(dir, "--set task.eval_size=4 --set task.eval_every=0 --set log_samples_every=1");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  std::istringstream lines(testing::read_all(dir.path() + "/run/samples.jsonl"));
  std::map<std::pair<std::string, int64_t>, int> seen;  // (kind, step) -> samples
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    ++seen[{j["kind"].get<std::string>(), j["step"].get<int64_t>()}];
    EXPECT_TRUE(j["prompt"].is_string() && j["completion"].is_string() && j["answer"].is_string()) << line;
    EXPECT_TRUE(j["reward"].is_number()) << line;
    if (j["kind"] == "train") {
      EXPECT_TRUE(j["advantage"].is_number()) << line;
    }
    if (j["kind"] == "eval") {
      EXPECT_TRUE(j["correct"].is_boolean()) << line;
    }
  }
  const std::map<std::pair<std::string, int64_t>, int> want = {
      {{"eval", 0}, 4}, {{"train", 1}, 4}, {{"train", 2}, 4}, {{"train", 3}, 4}, {{"eval", 3}, 4}};
  EXPECT_EQ(seen, want);
  const std::string log = testing::read_all(dir.path() + "/run/logs/orchestrator.log");
  for (const char* step : {"step 1/3  ETA", "step 2/3  ETA", "step 3/3  ETA 0s"}) EXPECT_NE(log.find(step), std::string::npos) << log;
  EXPECT_NE(r.cli.err.find("step 3/3  ETA 0s"), std::string::npos) << r.cli.err;  // the last one, always
}

// A dataset's other fields reach the reward server as metadata, with the prompt the model read.
TEST(RunReward, DatasetMetadataReachesTheRewardServer) {
  auto server = RewardServerProcess::start("tests/reference/faulty_reward_server.py", {"--mode", "ok"});
  ASSERT_TRUE(server->ok()) << server->log();
  testing::TempDir dir;
  std::string rows;
  for (int a = 0; a < 10; ++a)
    for (int b = 0; b < 5; ++b) rows += str("{\"q\": \"", a, "+", b, "=\", \"a\": ", a + b, ", \"id\": 7, \"source\": \"t\"}\n");
  const std::string data = dir.write("data.jsonl", rows);
  const RewardRun r = run_tiny(dir, str("--set task.name=jsonl --set task.dataset=", data,
                                        " --set task.prompt_field=q --set task.answer_field=a --set task.eval_size=4",
                                        " --set task.reward=http --set task.reward_url=", server->url()));
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  testing::expect_every_sample_accounted_for(r.summary);
  int logged = 0;
  for (const json& step : r.steps) {
    if (!step.contains("reward_server_logs")) continue;
    EXPECT_EQ(step["reward_server_logs"]["meta_id"], 7.0) << step.dump();   // the row's "id"
    EXPECT_EQ(step["reward_server_logs"]["prompt_ok"], 1.0) << step.dump(); // query = prompt + completion
    ++logged;
  }
  EXPECT_GT(logged, 0);
}

// Chat rows need a chat template: a model without one is refused before anything starts, naming
// the dataset and the keys.
TEST(RunReward, ChatRowsWithoutAChatTemplateAreRefusedAtTheStart) {
  testing::TempDir dir;
  const std::string data = dir.write("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"1+1=\"}], \"answer\": \"2\"}\n"
                                                   "{\"messages\": [{\"role\": \"user\", \"content\": \"1+2=\"}], \"answer\": \"3\"}\n");
  const RewardRun r = run_tiny(dir, str("--set task.name=jsonl --set task.dataset=", data, " --set task.eval_size=1"));
  EXPECT_NE(r.cli.exit_code, 0);
  EXPECT_NE(r.cli.err.find("chat.jsonl: rows with \"messages\" (task.messages_field) are chats, which need a chat template"),
            std::string::npos)
      << r.cli.err;
}

// The short CI version of the README's second example: configs/smollm2-arithmetic.yaml as shipped,
// on the real SmolLM2-135M-Instruct, with fewer and smaller steps, its reward from the example
// server (a real process).
TEST(RunReward, SmolLM2ArithmeticConfigRunsWithTheExampleRewardServer) {
  const fs::path gguf = testing::smollm2_dir().parent_path() / "smollm2-135m-instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) {
    if (testing::skip_model_tests()) GTEST_SKIP() << gguf << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << gguf << " is missing: run scripts/setup.sh --test, or set RLRUN_SKIP_MODEL_TESTS=1";
  }
  auto server = RewardServerProcess::start("examples/reward_server.py", {});
  ASSERT_TRUE(server->ok()) << server->log();
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  const testing::CliRun cli = testing::run_rlrun(
      dir, str("'", RLRUN_SOURCE_DIR, "/configs/smollm2-arithmetic.yaml' --run-dir '", run,
               "' --set metrics_bind=127.0.0.1:0 --set model.checkpoint='", gguf.string(),
               "' --set number_of_steps=2 --set prompts_batch_size_for_trainer=2 --set group_size=4 --set max_tokens=16",
               " --set discard_group_zero_advantage=false --set task.eval_size=8 --set task.reward=http",
               " --set task.reward_url=", server->url()));
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["steps_completed"], 2);
  testing::expect_every_sample_accounted_for(summary);
  EXPECT_GE(summary["reward"]["server"]["samples_scored"].get<int64_t>(), summary["samples"]["trained"].get<int64_t>());
  EXPECT_GT(summary["samples"]["trained"].get<int64_t>(), 0);
  EXPECT_TRUE(summary["eval"]["accuracy_before"].is_number());
  EXPECT_TRUE(summary["eval"]["accuracy_after"].is_number());
  EXPECT_TRUE(fs::exists(fs::path(run) / "model" / "model.safetensors"));
}

}  // namespace
}  // namespace rlrun::orchestrator
