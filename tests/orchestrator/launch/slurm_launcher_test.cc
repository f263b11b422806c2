// The Slurm launcher's pure parts: the srun command line, step lookup, exit decoding, and the
// checks start() makes before anything runs. slurm_e2e_test.cc runs it
// against a real Slurm.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include "orchestrator/launch/slurm_launcher.h"
#include "orchestrator/launch/spawn.h"

namespace rlrun::orchestrator {
namespace {

ProcessSpec spec(const std::string& node, std::vector<int> gpus) {
  ProcessSpec s;
  s.name = "trainer-0";
  s.argv = {"/opt/rlrun", "trainer", "--rank", "0"};
  s.log_path = "/tmp/trainer-0.log";
  s.node = node;
  s.gpus = std::move(gpus);
  s.cpus = 4;
  return s;
}

// Runs the step prologue of `cmd` for real (without srun), with Slurm's CUDA_VISIBLE_DEVICES
// `slurm_cvd` ("" = unset), in place of the worker a command that prints the devices it sees and
// its first argument, after the prologue's own line.
std::string run_prologue(const std::vector<std::string>& cmd, const std::string& slurm_cvd) {
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID=77", "SLURM_STEP_ID=3",
                                   "SLURMD_NODENAME=node2"};
  if (!slurm_cvd.empty()) argv.push_back("CUDA_VISIBLE_DEVICES=" + slurm_cvd);
  argv.insert(argv.end(), cmd.begin() + 10, cmd.begin() + 15);
  argv.insert(argv.end(), {"/bin/sh", "-c", "echo \"$CUDA_VISIBLE_DEVICES|$1\"", "x", "arg"});
  auto out = run_and_capture(argv);
  return out.ok() ? *out : out.status().to_string();
}

TEST(SrunCommand, CpuStep) {
  const std::vector<std::string> expected = {
      "srun", "--jobid=77", "--nodes=1", "--ntasks=1", "--nodelist=node2", "--exact", "--overlap",
      "--cpus-per-task=4", "--kill-on-bad-exit=1", "--job-name=rlrun-trainer-0"};
  auto cmd = srun_command("77", spec("node2", {}), slurm_step_name("trainer-0", 1));
  ASSERT_EQ(cmd.size(), 10u + 5u + 4u);
  EXPECT_EQ(std::vector<std::string>(cmd.begin(), cmd.begin() + 10), expected);
  EXPECT_EQ(cmd[10], "/bin/sh");
  EXPECT_EQ(cmd[13], "");  // no GPU planned: Slurm's CUDA_VISIBLE_DEVICES is left alone
  EXPECT_EQ(cmd[15], "/opt/rlrun");
  EXPECT_EQ(slurm_step_name("trainer-0", 3), "rlrun-trainer-0.r3");
  // The prologue names the step and node in the worker's log, then execs it with its arguments.
  EXPECT_EQ(run_prologue(cmd, ""), "rlrun: step 77.3 on node node2 (CUDA_VISIBLE_DEVICES=)\n|arg\n");
  EXPECT_EQ(run_prologue(cmd, "0,1"), "rlrun: step 77.3 on node node2 (CUDA_VISIBLE_DEVICES=0,1)\n0,1|arg\n");
}

TEST(SrunCommand, GpuStepNarrowsCudaVisibleDevices) {
  auto cmd = srun_command("77", spec("node1", {1, 3}), "rlrun-trainer-0");
  ASSERT_EQ(cmd.size(), 10u + 5u + 4u);
  EXPECT_EQ(cmd[10], "/bin/sh");
  EXPECT_EQ(cmd[11], "-c");
  EXPECT_EQ(cmd[13], "2,4");  // 1-based fields of Slurm's CUDA_VISIBLE_DEVICES
  EXPECT_EQ(cmd[14], "1,3");  // used as is when Slurm set none
  EXPECT_EQ(cmd[15], "/opt/rlrun");
  // It must pick the planned entries of whatever list Slurm exported, or fall back to the
  // planned indices.
  const std::string line = "rlrun: step 77.3 on node node2 (CUDA_VISIBLE_DEVICES=";
  EXPECT_EQ(run_prologue(cmd, "4,5,6,7"), line + "5,7)\n5,7|arg\n");
  EXPECT_EQ(run_prologue(cmd, "0,1,2,3"), line + "1,3)\n1,3|arg\n");
  EXPECT_EQ(run_prologue(cmd, ""), line + "1,3)\n1,3|arg\n");
}

TEST(SrunCommand, StepLookup) {
  const std::string squeue = "5.0|rlrun-trainer-0\n5.1|rlrun-rollout-0\n5.12|rlrun-trainer-0\n5.3|rlrun-trainer-00\n";
  EXPECT_EQ(find_step_id(squeue, slurm_step_name("trainer-0", 1)), "5.12");  // the newest
  EXPECT_EQ(find_step_id(squeue, "rlrun-rollout-0"), "5.1");
  EXPECT_EQ(find_step_id(squeue, "rlrun-rollout-1"), "");
  EXPECT_EQ(find_step_id("garbage\n|\n5|rlrun-x\n", "rlrun-x"), "");
}

TEST(SrunCommand, ExitDecoding) {
  auto status_of = [](const char* script) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", script, static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  };
  EXPECT_EQ(srun_exit("a", status_of("exit 0")).describe(), "exited with code 0");
  EXPECT_EQ(srun_exit("a", status_of("exit 3")).describe(), "exited with code 3");
  EXPECT_EQ(srun_exit("a", status_of("exit 137")).signal, SIGKILL);  // srun: task killed by SIGKILL
  EXPECT_EQ(srun_exit("a", status_of("exit 143")).signal, SIGTERM);
  EXPECT_EQ(srun_exit("a", status_of("kill -9 $$")).signal, SIGKILL);  // srun itself killed
}

TEST(SlurmLauncher, StartChecksThePlanAgainstTheAllocation) {
  SlurmAllocation a{"77", {{"node1", "127.0.0.1", 2, 4}, {"node2", "127.0.0.1", 0, 4}}};
  auto launcher = make_slurm_launcher(a);
  Status st = launcher->start(spec("node9", {}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node \"node9\" is not in job 77 (its nodes: node1, node2)"), std::string::npos);
  st = launcher->start(spec("node1", {1, 2}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("GPU 2 does not exist on node node1, where job 77 holds 2 GPU(s)"), std::string::npos);
  ProcessSpec greedy = spec("node2", {});
  greedy.cpus = 5;
  st = launcher->start(greedy);
  EXPECT_NE(st.message().find("wants 5 CPUs, but job 77 holds 4 on node node2"), std::string::npos) << st.message();
  ProcessSpec empty = spec("node1", {});
  empty.argv.clear();
  EXPECT_FALSE(launcher->start(empty).ok());
  EXPECT_EQ(launcher->live_count(), 0u);
  EXPECT_FALSE(launcher->kill("trainer-0").ok());
}

// Without srun on PATH, start() says so instead of a worker that exits 127 later.
TEST(SlurmLauncher, StartWithoutSrunIsAnError) {
  SlurmAllocation a{"77", {{"node1", "127.0.0.1", 2, 4}}};
  auto launcher = make_slurm_launcher(a);
  const std::string path = std::getenv("PATH");
  ::setenv("PATH", "/nonexistent", 1);
  const Status st = launcher->start(spec("node1", {}));
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(st.message(), "process trainer-0: starting its srun step: cannot run srun: not found in PATH (/nonexistent)");
  EXPECT_EQ(launcher->live_count(), 0u);
}

}  // namespace
}  // namespace rlrun::orchestrator
