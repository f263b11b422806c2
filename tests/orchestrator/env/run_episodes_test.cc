// Episodes in a real run (configs/tiny.yaml, its random model on one-digit arithmetic): every row
// is an episode that an environment server (the test double tests/reference/episode_env.py, a
// real process) runs with two calls through its session. The run trains on the recorded tokens,
// the environment's masked; an environment that drops connections, hangs or answers garbage loses
// no episode (each is retried or recorded as failed with its reason); one that is gone stops the
// run with an error naming it, and summary.json accounts for every episode and sample.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/observe/log.h"
#include "tests/orchestrator/cli_test_util.h"
#include "tests/orchestrator/reward/reward_server_process.h"
#include "tests/orchestrator/run/summary_checks.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::RewardServerProcess;

struct EpisodeRun {
  testing::CliRun cli;
  json summary;
  std::vector<json> steps;
};

// The tiny model's vocabulary is the built-in tokenizer's (397 ids), so every sampled id decodes.
EpisodeRun run_tiny(const testing::TempDir& dir, const std::string& env_url, const std::string& sets) {
  const std::string run = dir.path() + "/run";
  EpisodeRun r;
  r.cli = testing::run_rlrun(dir, str("'", RLRUN_SOURCE_DIR, "/configs/tiny.yaml' --run-dir '", run,
                                      "' --set model.vocab_size=397 --set heartbeat_timeout_seconds=60 ",
                                      "--set task.environment_url=", env_url, " ", sets));
  if (fs::exists(run + "/summary.json")) r.summary = json::parse(testing::read_all(run + "/summary.json"));
  std::istringstream lines(testing::read_all(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) r.steps.push_back(json::parse(line));
  return r;
}

void expect_every_episode_accounted_for(const json& e) {
  EXPECT_EQ(e["started"].get<int64_t>(), e["completed"].get<int64_t>() + e["failed"].get<int64_t>() +
                                             e["cancelled"].get<int64_t>() + e["in_flight_at_exit"].get<int64_t>())
      << e.dump(2);
  EXPECT_EQ(e["attempts"].get<int64_t>(), e["started"].get<int64_t>() + e["retried"].get<int64_t>()) << e.dump(2);
}

TEST(RunEpisodes, EpisodesTrainOnTheirRecordedTokensWithTheEnvironmentsMasked) {
  auto env = RewardServerProcess::start("tests/reference/episode_env.py", {});
  ASSERT_TRUE(env->ok()) << env->log();
  testing::TempDir dir;
  const EpisodeRun r = run_tiny(dir, env->url(), "--set number_of_steps=4");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  EXPECT_NE(r.cli.err.find("its episodes call the run's OpenAI endpoint http://127.0.0.1:"), std::string::npos) << r.cli.err;
  EXPECT_EQ(r.summary["steps_completed"], 4);
  testing::expect_every_sample_accounted_for(r.summary);
  const json& e = r.summary["episodes"];
  expect_every_episode_accounted_for(e);
  EXPECT_EQ(e["environment_url"], env->url());
  EXPECT_EQ(e["failed"], 0);
  EXPECT_EQ(e["retried"], 0);
  EXPECT_GE(e["completed"].get<int64_t>(), 4 * 2 * 4);  // 4 steps of 2 groups of 4
  // two calls each (and those of episodes still running at the end, whose turns are not counted)
  EXPECT_EQ(e["turns"].get<int64_t>(), 2 * e["completed"].get<int64_t>());
  EXPECT_GE(e["calls"].get<int64_t>(), e["turns"].get<int64_t>());
  EXPECT_GE(e["policy_tokens_trained"].get<int64_t>(), r.summary["samples"]["trained"].get<int64_t>());
  // The environment checks what it was promised: the second call's prompt begins with the first
  // call's prompt and tokens as sampled wherever the texts agree (the first answer ran to
  // max_tokens, its text is the tokens'); those episodes train as one sequence with the
  // environment's "\nagain:" masked, the others as two.
  double exact = 0;
  int lines = 0;
  for (const json& step : r.steps) {  // the means of the episodes ended since the previous line
    if (!step.contains("reward_server_logs")) continue;
    ++lines;
    exact += step["reward_server_logs"]["exact"].get<double>();
    EXPECT_EQ(step["reward_server_logs"]["turns"], 2.0);
  }
  EXPECT_GT(lines, 0);
  EXPECT_GT(e["exact_turns"].get<int64_t>(), 0) << e.dump(2);
  EXPECT_GT(e["environment_tokens_masked"].get<int64_t>(), 0) << e.dump(2);
  EXPECT_LT(e["training_sequences"].get<int64_t>(), e["turns"].get<int64_t>()) << e.dump(2);
  EXPECT_GT(exact, 0.0);
}

TEST(RunEpisodes, AnEnvironmentThatDropsHangsAndAnswersGarbageLosesNoEpisode) {
  auto env = RewardServerProcess::start("tests/reference/episode_env.py",
                                        {"--fail", "drop=0.1", "--fail", "hang=0.05", "--fail", "garbage=0.1",
                                         "--fail", "status=0.05", "--fail", "noreward=0.05", "--seed", "7"});
  ASSERT_TRUE(env->ok()) << env->log();
  testing::TempDir dir;
  const EpisodeRun r = run_tiny(dir, env->url(),
                                "--set number_of_steps=4 --set task.environment_timeout_seconds=3 "
                                "--set task.environment_max_attempts=6 --set task.environment_max_failed_episodes=1000");
  ASSERT_EQ(r.cli.exit_code, 0) << r.cli.err;
  EXPECT_EQ(r.summary["steps_completed"], 4);
  testing::expect_every_sample_accounted_for(r.summary);
  const json& e = r.summary["episodes"];
  expect_every_episode_accounted_for(e);
  EXPECT_GT(e["retried"].get<int64_t>(), 0) << e.dump(2);
  EXPECT_NE(r.cli.err.find("attempt 1 failed: " + env->url()), std::string::npos) << r.cli.err;
  // An episode whose attempts all failed is listed with its reason and discarded as such.
  for (const json& f : e["failures"]) EXPECT_NE(f.get<std::string>().find(env->url()), std::string::npos) << f;
  EXPECT_EQ(e["failed"].get<int64_t>(), r.summary["samples"]["discarded"].value("episode_failed", int64_t{0}));
}

TEST(RunEpisodes, AnEnvironmentThatIsGoneStopsTheRunNamingIt) {
  auto env = RewardServerProcess::start("tests/reference/episode_env.py", {"--fail", "status=1"});
  ASSERT_TRUE(env->ok()) << env->log();
  testing::TempDir dir;
  const EpisodeRun r = run_tiny(dir, env->url(),
                                "--set number_of_steps=4 --set task.environment_max_attempts=2 "
                                "--set task.environment_max_failed_episodes=3");
  EXPECT_NE(r.cli.exit_code, 0);
  EXPECT_NE(r.cli.err.find("3 episodes failed every one of their 2 attempts (task.environment_max_failed_episodes = 3): "
                           "the environment server " + env->url()),
            std::string::npos)
      << r.cli.err;
  EXPECT_NE(r.cli.err.find("HTTP 500"), std::string::npos) << r.cli.err;
  ASSERT_TRUE(r.summary.is_object());
  testing::expect_every_sample_accounted_for(r.summary);
  const json& e = r.summary["episodes"];
  expect_every_episode_accounted_for(e);
  EXPECT_EQ(e["failed"], 3);
  EXPECT_EQ(e["completed"], 0);
  EXPECT_EQ(e["failures"].size(), 3u);
}

// The example as a user runs it: configs/smollm2-calculator.yaml on the real SmolLM2-135M-Instruct
// with examples/calculator_env.py, the official `openai` client calling each session (the
// reference venv's Python), one short step and an evaluation before and after. The step trains 16
// sampled episodes: about a third of them call the calculator, so one with a masked tool reply is
// all but certain (with 4, a quarter of the seeds trained none).
TEST(RunEpisodes, TheCalculatorExampleRunsWithTheOpenAiClient) {
  const fs::path gguf = testing::smollm2_dir().parent_path() / "smollm2-135m-instruct.Q4_1.gguf";
  if (!fs::exists(gguf)) {
    if (testing::skip_model_tests()) GTEST_SKIP() << gguf << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << gguf << " is missing: run scripts/setup.sh --test, or set RLRUN_SKIP_MODEL_TESTS=1";
  }
  auto env = RewardServerProcess::start("examples/calculator_env.py", {}, RLRUN_PYREF_PYTHON);
  ASSERT_TRUE(env->ok()) << env->log();
  testing::TempDir dir;
  const std::string run = dir.path() + "/run";
  const testing::CliRun cli = testing::run_rlrun(
      dir, str("'", RLRUN_SOURCE_DIR, "/configs/smollm2-calculator.yaml' --run-dir '", run,
               "' --set metrics_bind=127.0.0.1:0 --set model.checkpoint='", gguf.string(),
               "' --set number_of_steps=1 --set prompts_batch_size_for_trainer=4 --set group_size=4",
               " --set discard_group_zero_advantage=false --set task.eval_size=4 --set task.environment_url=", env->url()));
  ASSERT_EQ(cli.exit_code, 0) << cli.err << env->log();
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["steps_completed"], 1);
  testing::expect_every_sample_accounted_for(summary);
  const json& e = summary["episodes"];
  expect_every_episode_accounted_for(e);
  EXPECT_EQ(e["failed"], 0) << e.dump(2);
  EXPECT_GE(e["completed"].get<int64_t>(), 16 + 2 * 4);  // four groups, two evaluations
  EXPECT_GT(summary["samples"]["trained"].get<int64_t>(), 0);
  // The model calls the calculator at least sometimes: those second turns continue the recorded
  // tokens through the chat template, and the tool's reply is masked.
  // (the measured run: 623 of 624; a turn whose text the template changes would start a sequence)
  const int64_t second_turns = e["turns"].get<int64_t>() - e["completed"].get<int64_t>();
  EXPECT_GT(second_turns, 0) << e.dump(2);
  EXPECT_GE(4 * e["exact_turns"].get<int64_t>(), 3 * second_turns) << e.dump(2);
  EXPECT_GT(e["environment_tokens_masked"].get<int64_t>(), 0) << e.dump(2);
  EXPECT_TRUE(summary["eval"]["accuracy_before"].is_number());
  EXPECT_TRUE(summary["eval"]["accuracy_after"].is_number());
}

}  // namespace
}  // namespace rlrun::orchestrator
