// `rlrun validate` end to end: the real binary on good and bad files, exit codes and stderr.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using rlrun::testing::CliRun;
using rlrun::testing::read_all;
using rlrun::testing::run_rlrun;
using rlrun::testing::TempDir;

TEST(ValidateCli, GoodConfigPrintsTheEffectiveConfigAndExitsZero) {
  TempDir dir;
  const std::string path = dir.write("good.yaml", "group_size: 4\nmodel:\n  num_layers: 2\n");
  CliRun r = run_rlrun(dir, "validate '" + path + "' --set seed=9 --set=model.hidden_size=128");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // stderr names the model (architecture, parameters, context, RoPE, dtype); stdout is the config.
  EXPECT_EQ(r.err, "model: llama, 791.2K parameters, context 2048, RoPE default (theta 10000), head_dim 32, "
                   "dtype not given\n");
  EXPECT_THAT(r.out, HasSubstr("\ngroup_size: 4\n"));
  EXPECT_THAT(r.out, HasSubstr("\nseed: 9\n"));
  EXPECT_THAT(r.out, HasSubstr("\nmodel:\n  architecture: llama\n  hidden_size: 128\n  num_layers: 2\n"));
  // The output is itself a valid config with the same meaning.
  const std::string again = dir.write("again.yaml", r.out);
  CliRun r2 = run_rlrun(dir, "validate '" + again + "'");
  EXPECT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(r2.out, r.out);
}

TEST(ValidateCli, ShippedConfigsValidate) {
  TempDir dir;
  for (const char* name : {"configs/quickstart.yaml", "configs/tiny.yaml", "configs/defaults.yaml"}) {
    CliRun r = run_rlrun(dir, str("validate '", RLRUN_SOURCE_DIR, "/", name, "'"));
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
  }
}

TEST(ValidateCli, BadConfigPrintsEveryErrorAndExitsTwo) {
  TempDir dir;
  const std::string path = dir.write("bad.yaml",
                                     "max_async_rollot: 2\n"
                                     "use_tis: true\n"
                                     "model:\n  num_heads: 3\n");
  CliRun r = run_rlrun(dir, "validate '" + path + "' --set group_size=1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr(path + ":1: unknown key `max_async_rollot` (did you mean "
                                      "`max_async_rollout`?)\n"));
  EXPECT_THAT(r.err, HasSubstr(path + ":2: `use_tis: true` with `ppo_clip_ref_logprobs: rollout`"));
  EXPECT_THAT(r.err, HasSubstr(path + ":4: `model.hidden_size` (256) is not divisible by "
                                      "`model.num_heads` (3)"));
  EXPECT_THAT(r.err, HasSubstr("--set group_size=1: `group_size` = 1 is out of range: allowed "
                               "[2, 4096]\n"));
  EXPECT_THAT(r.err, HasSubstr("rlrun validate: the configuration has 5 errors\n"));
  EXPECT_THAT(r.err, Not(HasSubstr("terminate")));  // no exception escaped
}

TEST(ValidateCli, SyntaxErrorAndMissingFileExitTwo) {
  TempDir dir;
  const std::string path = dir.write("broken.yaml", "seed: 1\ngroup_size: [4\n");
  CliRun r = run_rlrun(dir, "validate '" + path + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(path + ":"));
  EXPECT_THAT(r.err, HasSubstr("YAML syntax error"));
  CliRun missing = run_rlrun(dir, "validate '" + dir.path() + "/absent.yaml'");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("absent.yaml: config file does not exist"));
}

TEST(ValidateCli, UsageErrorsExitTwo) {
  TempDir dir;
  CliRun none = run_rlrun(dir, "validate");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("rlrun validate: missing CONFIG"));
  CliRun flag = run_rlrun(dir, "validate x.yaml --frobnicate");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_THAT(flag.err, HasSubstr("unknown flag `--frobnicate`"));
}

TEST(ValidateCli, PrintDefaultsIsDefaultsYamlAndHelpWorks) {
  TempDir dir;
  CliRun r = run_rlrun(dir, "validate --print-defaults");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, read_all(str(RLRUN_SOURCE_DIR, "/configs/defaults.yaml")));
  CliRun help = run_rlrun(dir, "validate --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: rlrun validate CONFIG [--set key=value ...]"));
  CliRun overview = run_rlrun(dir, "--help");
  EXPECT_THAT(overview.out, HasSubstr("validate"));
}

}  // namespace
}  // namespace rlrun
