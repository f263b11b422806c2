// `rlrun version`: the build's backends, and the host's compute: CPU features, the GEMM library's
// kernels and the measured speed. A library held to kernels older than the host runs (oneDNN's
// ONEDNN_MAX_CPU_ISA, as OpenBLAS once fell back by itself) is named as such.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/cpu/cpu_features.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using rlrun::testing::CliRun;
using rlrun::testing::run_rlrun;
using rlrun::testing::run_shell;
using rlrun::testing::TempDir;

TEST(VersionCli, NamesTheCpuItsKernelsAndTheirMeasuredSpeed) {
  TempDir dir;
  CliRun r = run_rlrun(dir, "version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rlrun "));
  EXPECT_THAT(r.out, HasSubstr("GEMM oneDNN "));
  EXPECT_THAT(r.out, HasSubstr("GFLOP/s"));
  EXPECT_THAT(r.out, HasSubstr(engine::cpu::cpu_features().flags()));
  EXPECT_THAT(r.out, Not(HasSubstr("OLDER"))) << "this host's products run kernels older than it supports";
}

TEST(VersionCli, AGemmHeldToOlderKernelsIsNamed) {
  if (!engine::cpu::cpu_features().avx2) GTEST_SKIP() << "no wider kernels than SSE4.1 on this CPU";
  TempDir dir;
  CliRun r = run_shell(dir, std::string("ONEDNN_MAX_CPU_ISA=SSE41 '") + RLRUN_BINARY + "' version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kernels sse41 (OLDER than this CPU's"));
}

}  // namespace
}  // namespace rlrun
