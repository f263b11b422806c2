// `rlrun CONFIG` end to end: the real binary on configs/tiny.yaml, with its trainer and rollout
// worker processes, on loopback. Checks the outputs a user and a dashboard rely on.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs rlrun from the source folder (the config's relative paths) and returns its exit code.
int run_rlrun(const std::string& args, const fs::path& output) {
  const std::string cmd = std::string("cd '") + RLRUN_SOURCE_DIR + "' && '" + RLRUN_BINARY + "' " + args + " > '" +
                          output.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class RunEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlrun_e2e_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(RunEndToEnd, TinyConfigRunsEveryStepAndAccountsForEverySample) {
  const fs::path run = dir_ / "run";
  const int code = run_rlrun("configs/tiny.yaml --run-dir '" + run.string() +
                                 "' --set metrics_bind=127.0.0.1:0 --set task.eval_size=4"
                                 " --set heartbeat_timeout_seconds=60"
                                 // a random model rarely earns a reward: keep zero-spread groups
                                 " --set discard_group_zero_advantage=false",
                             dir_.string() + ".out");
  const std::string output = read_file(dir_.string() + ".out");
  ASSERT_EQ(code, 0) << output;

  const json summary = json::parse(read_file(run / "summary.json"));
  for (const char* key : {"steps_completed", "wall_seconds", "samples", "reward_mean", "eval", "trainer_idle_fraction",
                          "rollout_idle_fraction", "tokens_per_second", "peak_memory_bytes", "worker_restarts", "exit"})
    EXPECT_TRUE(summary.contains(key)) << key;
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 3);
  const json& samples = summary["samples"];
  EXPECT_EQ(samples["lost"], 0);
  EXPECT_GT(samples["generated"].get<int64_t>(), 0);
  EXPECT_GT(samples["trained"].get<int64_t>(), 0);
  int64_t discarded = 0;
  for (const auto& [reason, n] : samples["discarded"].items()) discarded += n.get<int64_t>();
  // Every generated sample was trained or discarded (a failed generation is discarded without
  // having been generated).
  EXPECT_EQ(samples["trained"].get<int64_t>() + discarded - samples["discarded"].value("generation_error", 0),
            samples["generated"].get<int64_t>())
      << summary.dump(2);
  EXPECT_TRUE(summary["eval"]["accuracy_before"].is_number());
  EXPECT_TRUE(summary["eval"]["accuracy_after"].is_number());
  EXPECT_TRUE(summary["peak_memory_bytes"].contains("trainer-0"));
  const double idle = summary["trainer_idle_fraction"].get<double>();
  EXPECT_GE(idle, 0.0);
  EXPECT_LE(idle, 1.0);

  std::ifstream metrics(run / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    const json step = json::parse(line);
    EXPECT_EQ(step["step"], ++lines);
    EXPECT_TRUE(step["trainer"].contains("loss")) << line;
  }
  EXPECT_EQ(lines, 3);

  const json timeline = json::parse(read_file(run / "timeline.json"));
  ASSERT_TRUE(timeline.is_array());
  std::set<std::string> processes, spans;
  for (const json& e : timeline) {
    if (e.value("name", "") == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e.value("ph", "") == "X") spans.insert(e["name"].get<std::string>());
  }
  EXPECT_TRUE(processes.count("orchestrator"));
  EXPECT_TRUE(processes.count("trainer-0"));
  for (const char* span : {"wait_batch", "train", "weight_sync", "train_step", "weight_send"})
    EXPECT_TRUE(spans.count(span)) << span;
  EXPECT_TRUE(fs::exists(run / "config.yaml"));
  EXPECT_TRUE(fs::exists(run / "logs" / "trainer-0.log"));
  EXPECT_TRUE(fs::exists(run / "logs" / "rollout-0.log"));
}

TEST_F(RunEndToEnd, BadConfigExitsTwoNamingTheKey) {
  const int code = run_rlrun("configs/tiny.yaml --set max_async_rollot=1 --run-dir '" + (dir_ / "bad").string() + "'",
                             dir_.string() + ".bad");
  const std::string output = read_file(dir_.string() + ".bad");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("max_async_rollot"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "summary.json"));
}

}  // namespace
}  // namespace rlrun::orchestrator
