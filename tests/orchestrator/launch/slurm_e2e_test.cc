// rlrun on a real Slurm: the test cluster's two fake nodes with fake GPUs (ctest fixture
// slurm_cluster, tests/orchestrator/launch/slurm_cluster_fixture.sh), found through SLURM_CONF.
//   SlurmCluster.*  the launcher's own checks (slurm_live_steps.cc) inside salloc and sbatch
//   SlurmRun.*      `rlrun configs/tiny.yaml` with `launcher: auto` through scripts/rlrun.sbatch
//                   (SPREAD) and inside salloc (PACK): the run ends ok, nothing is lost, and every
//                   worker ran on the node the plan chose (the first line of its log, written in
//                   its job step, names the node).
// Skipped, saying why, where the test cluster cannot run: not root, or Slurm not installed.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/common/eventually.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using rlrun::testing::CliRun;
using rlrun::testing::read_all;
using rlrun::testing::run_shell;
using rlrun::testing::TempDir;

// "" when this machine can run the test cluster, else why not (the fixture's own conditions).
std::string why_no_slurm() {
  if (::geteuid() != 0) return "the test cluster's daemons (slurmctld, slurmd, munged) need root";
  for (const char* tool : {"slurmctld", "slurmd", "munged", "sbatch", "salloc", "srun", "scontrol"}) {
    if (std::system(str("PATH=$PATH:/usr/sbin:/sbin command -v ", tool, " >/dev/null").c_str()) != 0) {
      return str(tool, " is not installed (scripts/install-deps.sh --test installs slurm-wlm and munge)");
    }
  }
  return "";
}

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = why_no_slurm(); !why.empty()) GTEST_SKIP() << why;
    const char* conf = std::getenv("SLURM_CONF");
    ASSERT_TRUE(conf != nullptr && fs::exists(conf))
        << "no test cluster: run this through ctest (fixture slurm_cluster), or start one with "
           "scripts/slurm-test-cluster.sh up and export the SLURM_CONF it prints";
  }

  // Runs `command` in the source folder (the configs' relative paths), at most 240 s.
  CliRun in_source(const std::string& command) {
    return run_shell(dir_, str("cd '", RLRUN_SOURCE_DIR, "' && timeout 240 ", command));
  }

  // `sbatch ARGS` in the source folder, then waits for the job: exit 0 when it COMPLETED (exit
  // code 0). Polls every 0.2 s: `sbatch --wait` polls every few seconds, up to 10.
  CliRun sbatch_and_wait(const std::string& args) {
    return in_source(str("sh -c 'id=$(sbatch --parsable ", args, ") || exit 1; ",
                         "while scontrol -o show job $id | grep -qE \"JobState=(PENDING|CONFIGURING|RUNNING|COMPLETING)\"; ",
                         "do sleep 0.2; done; scontrol -o show job $id | grep -q JobState=COMPLETED'"));
  }

  TempDir dir_;
};

using SlurmCluster = SlurmTest;
using SlurmRun = SlurmTest;

// The launcher's checks pass, none skipped: `output` is the live binary's gtest output.
void expect_live_steps_passed(const CliRun& run, const std::string& output) {
  EXPECT_EQ(run.exit_code, 0) << output << run.err;
  EXPECT_NE(output.find("[  PASSED  ] 4 tests"), std::string::npos) << output << run.err;
  EXPECT_EQ(output.find("SKIPPED"), std::string::npos) << output;
}

// GPUs known to the controller only (`--gres`: no SLURM_GPUS_* variable in the salloc shell).
TEST_F(SlurmCluster, LauncherStepsInsideSalloc) {
  const CliRun run = in_source(str("salloc -N2 --ntasks-per-node=2 --gres=gpu:4 --time=5 env RLRUN_SLURM_TEST_GPUS=4 '",
                                   RLRUN_SLURM_LIVE_STEPS, "'"));
  expect_live_steps_passed(run, run.out);
}

// GPUs from SLURM_GPUS_PER_NODE; the batch script runs on node1.
TEST_F(SlurmCluster, LauncherStepsInsideSbatch) {
  const std::string output = dir_.path() + "/batch.out";
  const CliRun run = sbatch_and_wait(str("-N2 --ntasks-per-node=2 --gpus-per-node=2 --time=5 --output=", output,
                                         " --wrap=\"env RLRUN_SLURM_TEST_GPUS=2 ", RLRUN_SLURM_LIVE_STEPS, "\""));
  expect_live_steps_passed(run, read_all(output));
}

// Arguments of a short tiny run on the cluster: `launcher: auto` must pick Slurm by itself.
std::string tiny_run(const std::string& run_dir, const std::string& placement) {
  return str("configs/tiny.yaml --run-dir \"", run_dir, "\" --set launcher=auto --set placement=", placement,
             " --set heartbeat_timeout_seconds=60 --set discard_group_zero_advantage=false");
}

// The run ended ok with every sample accounted for, and each worker's step ran on `nodes[worker]`.
void expect_run_ok(const std::string& run_dir, const std::map<std::string, std::string>& nodes,
                   const std::string& output) {
  ASSERT_TRUE(fs::exists(run_dir + "/summary.json")) << output;
  const nlohmann::json summary = nlohmann::json::parse(read_all(run_dir + "/summary.json"));
  EXPECT_EQ(summary["exit"], "ok") << output;
  EXPECT_EQ(summary["steps_completed"], 3);
  EXPECT_EQ(summary["samples"]["lost"], 0) << summary.dump(2);
  EXPECT_GT(summary["samples"]["trained"].get<int64_t>(), 0) << summary.dump(2);
  EXPECT_NE(output.find("launcher: slurm job "), std::string::npos) << output;
  for (const auto& [worker, node] : nodes) {
    const std::string log = read_all(run_dir + "/logs/" + worker + ".log");
    EXPECT_NE(log.find(str("rlrun: step ")), std::string::npos) << worker << ":\n" << log;
    EXPECT_NE(log.find(str(" on node ", node, " ")), std::string::npos) << worker << " should run on " << node << ":\n" << log;
  }
}

// sbatch scripts/rlrun.sbatch CONFIG, its #SBATCH lines overridden for the small cluster. SPREAD
// deals the trainer to node1 and the rollout worker to node2.
TEST_F(SlurmRun, TinyConfigThroughSbatchSpreadsOverTwoNodes) {
  const std::string run_dir = dir_.path() + "/run", output = dir_.path() + "/rlrun.out";
  const CliRun run = sbatch_and_wait(str("--export=ALL,RLRUN=", RLRUN_BINARY, " -N2 --ntasks-per-node=2 --cpus-per-task=1 ",
                                         "--gpus-per-node=1 --time=5 --output=", output, " scripts/rlrun.sbatch ",
                                         tiny_run(run_dir, "SPREAD")));
  const std::string text = read_all(output);
  ASSERT_EQ(run.exit_code, 0) << text << run.err;
  EXPECT_NE(text.find("node1: trainer-0\n"), std::string::npos) << text;  // the placement table
  EXPECT_NE(text.find("node2: rollout-0\n"), std::string::npos) << text;
  expect_run_ok(run_dir, {{"trainer-0", "node1"}, {"rollout-0", "node2"}}, text);
}

// salloc ... rlrun CONFIG: the orchestrator runs in the salloc shell (on no node of the job);
// PACK keeps both workers on node1.
TEST_F(SlurmRun, TinyConfigInsideSallocPacksOntoOneNode) {
  const std::string run_dir = dir_.path() + "/run";
  const CliRun run =
      in_source(str("salloc -N2 --ntasks-per-node=2 --time=5 '", RLRUN_BINARY, "' ", tiny_run(run_dir, "PACK")));
  const std::string text = run.out + run.err;
  ASSERT_EQ(run.exit_code, 0) << text;
  EXPECT_NE(text.find("node1: trainer-0, rollout-0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("node2: (idle)\n"), std::string::npos) << text;
  expect_run_ok(run_dir, {{"trainer-0", "node1"}, {"rollout-0", "node1"}}, text);
}

// Ctrl-C (SIGINT to rlrun inside salloc, as a terminal sends it) stops the run: summary.json says
// "interrupted", and rlrun itself ends its job steps (checked inside the still-live allocation).
TEST_F(SlurmRun, InterruptEndsTheRunAndItsSteps) {
  const std::string d = dir_.path(), run_dir = d + "/run";
  // In the allocation: rlrun in the background (its pid to d/pid), then, once it exited, the
  // job's steps still listed (the controller forgets ended steps within a moment: poll ~10 s).
  const std::string script = d + "/in-allocation.sh";
  {
    std::ofstream f(script);
    f << "'" << RLRUN_BINARY << "' " << tiny_run(run_dir, "SPREAD") << " --set number_of_steps=1000000 &\n"
      << "echo $! > '" << d << "/pid'\n"
      << "wait $!; echo $? > '" << d << "/code'\n"
      << "for i in $(seq 50); do\n"
      << "  squeue --steps --noheader --jobs=$SLURM_JOB_ID --format=%j | grep rlrun- > '" << d << "/steps' || break\n"
      << "  sleep 0.2\n"
      << "done\n"
      << "echo done > '" << d << "/finished'\n";
  }
  ASSERT_EQ(std::system(str("cd '", RLRUN_SOURCE_DIR, "' && (timeout 240 salloc -N2 --ntasks-per-node=2 --time=5 sh '",
                            script, "' > '", d, "/out' 2>&1 &)").c_str()),
            0);
  // (gives up early when rlrun already exited)
  testing::eventually([&] { return !read_all(run_dir + "/metrics.jsonl").empty() || !read_all(d + "/code").empty(); },
                      std::chrono::seconds(60));
  ASSERT_FALSE(read_all(run_dir + "/metrics.jsonl").empty()) << read_all(d + "/out");
  const int pid = std::atoi(read_all(d + "/pid").c_str());
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  testing::eventually([&] { return !read_all(d + "/code").empty(); }, std::chrono::seconds(30));
  const std::string out = read_all(d + "/out");
  ASSERT_FALSE(read_all(d + "/code").empty()) << "rlrun did not stop within 30 s of SIGINT:\n" << out;
  testing::eventually([&] { return !read_all(d + "/finished").empty(); }, std::chrono::seconds(15));
  ASSERT_TRUE(fs::exists(d + "/steps")) << "the allocation's script did not look at the steps:\n" << read_all(d + "/out");
  EXPECT_EQ(read_all(d + "/steps"), "") << "steps left after rlrun exited:\n" << out;
  const nlohmann::json summary = nlohmann::json::parse(read_all(run_dir + "/summary.json"));
  EXPECT_EQ(summary["exit"], "interrupted") << out;
  EXPECT_EQ(summary["samples"]["lost"], 0) << summary.dump(2);
}

}  // namespace
}  // namespace rlrun::orchestrator
