// RunRecorder (run/run_recorder.h): the loop's time adds a resumed run's earlier parts and stops
// with the loop; a step's metrics.jsonl line says what the step did; samples.jsonl takes untrusted
// completions; a file past log_files_max_mb is rotated; profile.json is written at the end only
// when this process completed a step.
#include "orchestrator/run/run_recorder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/common/config_test_util.h"
#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using Json = nlohmann::json;
using testing::PartEnv;

std::vector<Json> lines(const std::string& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
  return out;
}

struct RunRecorderTest : ::testing::Test {
  PartEnv env;
  rlrun::testing::TempDir dir;
  RunRecorder make() { return RunRecorder(env.config, dir.path(), env.steps, env.workers, *env.metrics, env.port.port()); }
};

TEST_F(RunRecorderTest, TheLoopsTimeAddsTheResumedPartsAndStopsWithTheLoop) {
  RunRecorder r = make();
  ResumeState resumed;
  resumed.steps_completed = 3;
  resumed.loop_seconds = 100;
  resumed.trainer_idle_seconds = 7;
  r.resume_from(resumed);
  EXPECT_EQ(r.loop_seconds(), 100);
  r.loop_started();
  env.port.advance(std::chrono::seconds(20));
  EXPECT_DOUBLE_EQ(r.loop_seconds(), 120);
  r.trainer_idle(2);
  r.loop_stopped();
  env.port.advance(std::chrono::seconds(20));
  EXPECT_DOUBLE_EQ(r.stats().loop_seconds, 120);
  EXPECT_DOUBLE_EQ(r.stats().trainer_idle_seconds, 9);
  r.finish(std::nullopt);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/profile.json")) << "this process completed no step";
}

TEST_F(RunRecorderTest, AStepsLineSaysWhatTheStepDid) {
  RunRecorder r = make();
  env.steps.completed = 4;
  env.steps.tokens_generated = 900;
  StepRecord record;
  record.step = 4;
  record.build.tokens = 321;
  record.group_ids = {8, 9};
  record.prompt_hash = "00ff";
  record.reward_mean = 0.5;
  record.redone = true;
  const std::map<std::string, double> trainer = {{"loss", 0.1}};
  r.write_step_line(RunRecorder::StepLine{record, 1.5, 2.5, 0.5, trainer, 0.75, 2, 10, 1, {{"task", 0.5}}, {}, 3});
  const std::vector<Json> got = lines(dir.path() + "/metrics.jsonl");
  ASSERT_EQ(got.size(), 1u);
  const Json& line = got[0];
  EXPECT_EQ(line["step"], 4);
  EXPECT_EQ(line["tokens_trained"], 321);
  EXPECT_EQ(line["tokens_generated_total"], 900);
  EXPECT_EQ(line["group_ids"], Json::array({8, 9}));
  EXPECT_EQ(line["redone"], true);
  EXPECT_EQ(line["trainer_restarts"], 1);
  EXPECT_EQ(line["eval_accuracy"], 0.75);
  EXPECT_EQ(line["reward_terms"]["task"], 0.5);
  EXPECT_FALSE(line.contains("reward_server_logs")) << "none came";
  EXPECT_EQ(line["reward_waiting"], 3);
  EXPECT_EQ(line["trainer"]["loss"], 0.1);
}

TEST_F(RunRecorderTest, SamplesTakeUntrustedBytesAndAFilePastItsLimitIsRotated) {
  env.config.log_files_max_mb = 1;
  RunRecorder r = make();
  r.log_samples("train", 2, {{{"completion", std::string("ok \xff\xfe bytes")}}});
  const std::vector<Json> got = lines(dir.path() + "/samples.jsonl");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["kind"], "train");
  EXPECT_EQ(got[0]["step"], 2);
  EXPECT_NE(got[0]["completion"].get<std::string>().find("bytes"), std::string::npos);
  { std::ofstream(dir.path() + "/samples.jsonl", std::ios::app) << std::string(2 << 20, 'x') << "\n"; }
  r.log_samples("eval", 3, {{{"completion", "after"}}});
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/samples.jsonl.1"));
  EXPECT_EQ(lines(dir.path() + "/samples.jsonl").size(), 1u);
}

TEST_F(RunRecorderTest, TheProfileIsWrittenEveryTenStepsAndAtTheEnd) {
  RunRecorder r = make();
  r.set_cluster_shape(1, 8);
  r.loop_started();
  for (int64_t step = 1; step <= RunRecorder::kProfileEvery; ++step) {
    env.steps.completed = step;
    r.after_step(step, {{"forward_backward_seconds", 1.0}}, 1.0, 0.1, std::nullopt, std::nullopt);
    EXPECT_EQ(std::filesystem::exists(dir.path() + "/profile.json"), step == RunRecorder::kProfileEvery) << step;
  }
  std::filesystem::remove(dir.path() + "/profile.json");
  r.finish(std::nullopt);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/profile.json"));
}

}  // namespace
}  // namespace rlrun::orchestrator
