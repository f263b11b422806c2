// `rlrun plan` end to end: the real binary on good, over-budget and bad configs (exit 0 / 3 / 2),
// --json output, and --compare against a run directory (exit 0 / 1).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

using ::testing::HasSubstr;
using rlrun::testing::CliRun;
using rlrun::testing::read_all;
using rlrun::testing::run_rlrun;
using rlrun::testing::TempDir;

const std::string kQuickstart = str("'", RLRUN_SOURCE_DIR, "/configs/quickstart.yaml'");
// Llama-2-7B's shape, planned for one 80 GiB GPU per process.
const std::string k7b =
    " --set backend=cuda --set device_memory_gb=80 --set model.hidden_size=4096 --set model.num_layers=32"
    " --set model.num_heads=32 --set model.num_kv_heads=32 --set model.intermediate_size=11008"
    " --set model.vocab_size=32000 --set model.max_position=4096 --set seq_len=4096 --set max_model_len=4096";

TEST(PlanCli, QuickstartFitsAndExitsZero) {
  TempDir dir;
  CliRun r = run_rlrun(dir, "plan " + kQuickstart);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("trainer rank (x1)"));
  EXPECT_THAT(r.out, HasSubstr("with gradient checkpointing"));
  EXPECT_THAT(r.out, HasSubstr("B per token"));
  EXPECT_THAT(r.out, HasSubstr("verdict: fits"));
}

TEST(PlanCli, SevenBillionOnOneGpuDoesNotFitExitsThreeWithLevers) {
  TempDir dir;
  CliRun r = run_rlrun(dir, "plan " + kQuickstart + k7b);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.out, HasSubstr("verdict: DOES NOT FIT"));
  EXPECT_THAT(r.out, HasSubstr("trainer: gradient_checkpointing=true  saves"));
  EXPECT_THAT(r.out, HasSubstr("trainer: trainer_num_workers=2 use_distributed_optimizer=true"));
}

TEST(PlanCli, JsonParsesAndHasTheDocumentedKeys) {
  TempDir dir;
  CliRun r = run_rlrun(dir, "plan --json " + kQuickstart + k7b);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["backend"], "cuda");
  EXPECT_EQ(j["fits"], false);
  EXPECT_EQ(j["rollout"]["kv_bytes_per_token"], 524288);
  EXPECT_TRUE(j["trainer"]["phase_peak_bytes"].contains("forward_backward"));
  EXPECT_EQ(j["levers"][0]["set"], "gradient_checkpointing=true");
}

TEST(PlanCli, BadConfigAndBadFlagsExitTwo) {
  TempDir dir;
  const std::string bad = dir.write("bad.yaml", "model:\n  num_heads: 3\n");
  CliRun r = run_rlrun(dir, "plan '" + bad + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(bad + ":2:"));
  EXPECT_EQ(run_rlrun(dir, "plan").exit_code, 2);
  EXPECT_EQ(run_rlrun(dir, "plan " + kQuickstart + " --bogus").exit_code, 2);
  EXPECT_EQ(run_rlrun(dir, "plan " + kQuickstart + " --compare " + dir.path()).exit_code, 2);
  CliRun help = run_rlrun(dir, "plan --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("Exit status: 0 the plan fits"));
}

TEST(PlanCli, CompareReadsTheRunDirectory) {
  TempDir dir;
  // fp32: the figures below are the fp32 plan's (compute_dtype auto is bf16 where the CPU has it).
  dir.write("run/config.yaml", read_all(str(RLRUN_SOURCE_DIR, "/configs/quickstart.yaml")) + "compute_dtype: fp32\n");
  CliRun missing = run_rlrun(dir, "plan --compare '" + dir.path() + "/run'");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("summary.json"));
  dir.write("run/summary.json",
            R"({"processes": [{"role": "trainer", "rank": 0, "backend_peak_bytes": 33872384,
                "peak_memory_bytes": 80000000,
                "phase_peak_bytes": {"forward_backward": 33872384, "weight_send": 22305280}},
               {"role": "rollout", "rank": 0, "peak_memory_bytes": 90000000}]})");
  CliRun r = run_rlrun(dir, "plan --compare '" + dir.path() + "/run'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The quickstart trainer's planned peak is 33872384 bytes: the step's 29411328 (memory_measured_test)
  // and its KL reference's 4461056 weights: ratio 1.
  EXPECT_THAT(r.out, HasSubstr("trainer 0 backend peak"));
  EXPECT_THAT(r.out, HasSubstr("   1.000\n"));
  EXPECT_THAT(r.out, HasSubstr("trainer 0 resident peak"));
  EXPECT_THAT(r.out, HasSubstr("  forward_backward"));
  EXPECT_THAT(r.out, HasSubstr("rollout 0 resident peak"));
  dir.write("run/summary.json", R"({"processes": [{"role": "trainer"}]})");
  r = run_rlrun(dir, "plan --compare '" + dir.path() + "/run'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("backend_peak_bytes"));
}

}  // namespace
}  // namespace rlrun
