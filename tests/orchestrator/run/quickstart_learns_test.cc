// The quickstart learns by RL: configs/quickstart.yaml as the README runs it, shortened to 200 RL
// steps. Held-out accuracy (greedy, prompts never trained on) must rise well above its value after
// the format warm-start, which is at chance: a wrong advantage sign, loss, packing or weight sync
// leaves it there. The slowest test of the suite (a few minutes on 2 cores), and the one that says
// the product works.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

using nlohmann::json;
using testing::TempDir;

TEST(QuickstartLearns, HeldOutAccuracyRisesThroughRl) {
  TempDir dir;
  const std::string run = dir.path() + "/run";
  const testing::CliRun r = testing::run_shell(
      dir, str("cd '", RLRUN_SOURCE_DIR, "' && '", RLRUN_BINARY, "' configs/quickstart.yaml --run-dir '", run,
               "' --set number_of_steps=200 --set task.eval_every=0 --set metrics_bind=127.0.0.1:0"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json summary = json::parse(testing::read_all(run + "/summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 200);
  EXPECT_EQ(summary["samples"]["lost"], 0);
  // Its early droughts (80 groups without a reward while about 1 sample in 100 earns one) are a
  // policy that rarely succeeds yet, not one that unlearned the task.
  EXPECT_TRUE(summary["reward_collapse_step"].is_null()) << summary.dump(2);
  const double before = summary["eval"]["accuracy_before"], after = summary["eval"]["accuracy_after"];
  EXPECT_LE(before, 0.15) << "the format warm-start alone must not solve the task";
  EXPECT_GE(after - before, 0.25) << "RL did not raise held-out accuracy: " << before << " -> " << after;
  EXPECT_GT(summary["reward_mean"]["last"].get<double>(), summary["reward_mean"]["first"].get<double>());
  EXPECT_NE(r.err.find("held-out accuracy: "), std::string::npos) << "the run prints the result at the end";
}

}  // namespace
}  // namespace rlrun::orchestrator
