// The Slurm launcher's steps, checked from inside an allocation: slurm_e2e_test.cc runs this
// binary inside `salloc -N2` and `sbatch --wait` on the test cluster's two fake nodes (which have
// fake GPUs). Not a ctest test of its own: outside an allocation it has nothing to check.
// RLRUN_SLURM_TEST_GPUS says how many GPUs per node the allocation was asked for.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "orchestrator/launch/slurm_launcher.h"
#include "orchestrator/launch/spawn.h"
#include "tests/common/eventually.h"

namespace rlrun::orchestrator {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first complete line of `text` that contains `part` ("" when none yet).
std::string line_with(const std::string& text, const std::string& part) {
  const size_t at = text.find(part);
  if (at == std::string::npos) return "";
  const size_t end = text.find('\n', at);
  if (end == std::string::npos) return "";
  const size_t begin = text.rfind('\n', at);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1));
}

// The value of `key=` in a "node=... step=... cvd=..." line.
std::string field(const std::string& line, const std::string& key) {
  const size_t at = line.find(key + "=");
  if (at == std::string::npos) return "?";
  const size_t start = at + key.size() + 1;
  return line.substr(start, line.find_first_of(" \n", start) - start);
}

class SlurmLive : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("SLURM_JOB_ID") == nullptr) {
      GTEST_SKIP() << "not inside a Slurm allocation: slurm_e2e_test.cc runs this binary inside salloc and sbatch";
    }
    auto a = read_slurm_allocation(slurm_environment(), *make_scontrol_queries());
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    allocation_ = *a;
    dir_ = fs::temp_directory_path() / ("rlrun_slurm_live_" + allocation_.job_id);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Starts one step per planned process; each writes where it runs, then sleeps.
  void start_plan(Launcher& launcher, const PlacementPlan& plan, const std::string& tag) {
    auto start_one = [&](const std::string& name, const Assignment& a) {
      ProcessSpec s;
      s.name = tag + "-" + name;
      s.argv = {"/bin/sh", "-c",
                "echo node=$SLURMD_NODENAME step=$SLURM_STEP_ID cvd=$CUDA_VISIBLE_DEVICES var=$RLRUN_LIVE_VAR; "
                "exec sleep 120"};
      s.env = {{"RLRUN_LIVE_VAR", s.name}};
      s.log_path = (dir_ / (s.name + ".log")).string();
      s.node = plan.nodes[a.node].name;
      s.gpus = a.devices;
      started_[s.name] = std::chrono::steady_clock::now();
      ASSERT_TRUE(launcher.start(s).ok());
      expected_[s.name] = a;
      specs_[s.name] = s;
    };
    for (size_t r = 0; r < plan.trainers.size(); ++r) start_one("trainer-" + std::to_string(r), plan.trainers[r]);
    for (size_t s = 0; s < plan.rollout_servers.size(); ++s) start_one("rollout-" + std::to_string(s), plan.rollout_servers[s]);
  }

  // Waits for every step's line and checks node, devices and environment against the plan.
  void check_where_they_ran(const PlacementPlan& plan) {
    std::set<std::string> step_ids;
    for (const auto& [name, a] : expected_) {
      std::string text;
      const fs::path log = dir_ / (name + ".log");
      // (the step prologue's line, then the process's own)
      for (int i = 0; i < 600 && (line_with(text, "var=").empty() || line_with(text, "rlrun: step").empty()); ++i) {
        std::this_thread::sleep_for(50ms);
        text = read_file(log);
      }
      EXPECT_NE(text.find("rlrun: step " + allocation_.job_id + "."), std::string::npos) << name << ": " << text;
      EXPECT_NE(text.find("on node " + plan.nodes[a.node].name + " "), std::string::npos) << name << ": " << text;
      const double latency = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_[name]).count();
      std::printf("[slurm-live] %-22s %s  (first output %.2f s after start)\n", name.c_str(),
                  line_with(text, "var=").c_str(), latency);
      EXPECT_EQ(field(text, "node"), plan.nodes[a.node].name) << name << ": " << text;
      std::string devices;
      for (size_t i = 0; i < a.devices.size(); ++i) {
        if (i > 0) devices += ',';
        devices += std::to_string(a.devices[i]);
      }
      EXPECT_EQ(field(text, "cvd"), devices) << name << ": " << text;  // the job holds whole fake nodes
      EXPECT_EQ(field(text, "var"), name);
      step_ids.insert(field(text, "step"));
    }
    EXPECT_EQ(step_ids.size(), expected_.size()) << "every process is its own job step";
  }

  std::vector<ProcessExit> wait_exits(Launcher& l, size_t n, std::chrono::seconds limit) {
    std::vector<ProcessExit> all;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (all.size() < n && std::chrono::steady_clock::now() < deadline) {
      for (auto& e : l.poll_exits()) all.push_back(e);
      std::this_thread::sleep_for(20ms);
    }
    return all;
  }

  void run_plan(PlacementStrategy strategy, const std::string& tag) {
    const int gpus = std::atoi(std::getenv("RLRUN_SLURM_TEST_GPUS") ? std::getenv("RLRUN_SLURM_TEST_GPUS") : "0");
    ASSERT_EQ(allocation_.nodes.size(), 2u);
    for (const NodeResources& n : allocation_.nodes) {
      EXPECT_EQ(n.gpus, gpus) << n.name;
      EXPECT_EQ(n.address, "127.0.0.1") << n.name;
    }
    PlacementRequest request;
    request.trainer_ranks = 2;
    request.inference_workers = 1;
    request.strategy = strategy;
    request.use_gpus = gpus > 0;
    auto plan = plan_placement(allocation_.nodes, request);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::set<int> nodes_used;
    for (const auto& a : plan->trainers) nodes_used.insert(a.node);
    for (const auto& a : plan->rollout_servers) nodes_used.insert(a.node);
    // PACK keeps everything on the first node when it fits; SPREAD uses both.
    if (strategy == PlacementStrategy::kSpread) {
      EXPECT_EQ(nodes_used.size(), 2u);
    } else if (gpus >= 3) {
      EXPECT_EQ(nodes_used, std::set<int>({0}));
    }

    auto launcher = make_slurm_launcher(allocation_);
    start_plan(*launcher, *plan, tag);
    ASSERT_EQ(launcher->live_count(), 3u);
    check_where_they_ran(*plan);

    const std::string victim = tag + "-trainer-1";
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(launcher->kill(victim).ok());
    auto exits = wait_exits(*launcher, 1, 20s);
    ASSERT_EQ(exits.size(), 1u);
    EXPECT_EQ(exits[0].name, victim);
    EXPECT_EQ(exits[0].signal, SIGKILL) << exits[0].describe();
    std::printf("[slurm-live] kill -> exit seen after %.2f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_EQ(launcher->live_count(), 2u);

    // A restarted worker (same name) is a new step; killing it must not hit the old one's record.
    ASSERT_TRUE(launcher->start(specs_[victim]).ok());
    const fs::path victim_log = dir_ / (victim + ".log");
    // (the log also holds srun's report of the first kill)
    auto starts_logged = [&] {
      const std::string text = read_file(victim_log);
      int n = 0;
      for (size_t at = text.find("var=" + victim); at != std::string::npos; at = text.find("var=" + victim, at + 1)) ++n;
      return n;
    };
    testing::eventually([&] { return starts_logged() >= 2; }, 30s, 50ms);
    ASSERT_EQ(starts_logged(), 2) << read_file(victim_log);
    ASSERT_TRUE(launcher->kill(victim).ok());
    exits = wait_exits(*launcher, 1, 20s);
    ASSERT_EQ(exits.size(), 1u);
    EXPECT_EQ(exits[0].name, victim);
    EXPECT_EQ(exits[0].signal, SIGKILL) << exits[0].describe();
    EXPECT_EQ(launcher->live_count(), 2u);

    const auto t1 = std::chrono::steady_clock::now();
    launcher->stop_all(5000ms);
    std::printf("[slurm-live] stop_all took %.2f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    EXPECT_EQ(launcher->live_count(), 0u);
    const std::string left = steps_named("rlrun-" + tag, 10s);
    EXPECT_EQ(left, "") << "steps left behind:\n" << left;
  }

  // squeue's lines for live steps whose name starts with `prefix`, once none is left or `limit`
  // passes: the controller forgets a step shortly after its srun has returned.
  std::string steps_named(const std::string& prefix, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto out = run_and_capture({"squeue", "--steps", "--noheader", "--jobs=" + allocation_.job_id, "--format=%i|%j"});
      if (!out.ok()) return out.status().to_string();
      std::string matching;
      std::istringstream lines(*out);
      for (std::string line; std::getline(lines, line);) {
        if (line.find("|" + prefix) != std::string::npos) matching += line + "\n";
      }
      if (matching.empty() || std::chrono::steady_clock::now() > deadline) return matching;
      std::this_thread::sleep_for(100ms);
    }
  }

  SlurmAllocation allocation_;
  fs::path dir_;
  std::map<std::string, Assignment> expected_;
  std::map<std::string, ProcessSpec> specs_;
  std::map<std::string, std::chrono::steady_clock::time_point> started_;
};

TEST_F(SlurmLive, PackPlan) { run_plan(PlacementStrategy::kPack, "pack"); }

TEST_F(SlurmLive, SpreadPlan) { run_plan(PlacementStrategy::kSpread, "spread"); }

TEST_F(SlurmLive, ExitCodeOfAFailedStep) {
  auto launcher = make_slurm_launcher(allocation_);
  ProcessSpec s;
  s.name = "fails";
  s.argv = {"/bin/sh", "-c", "echo failing on $SLURMD_NODENAME; exit 3"};
  s.log_path = (dir_ / "fails.log").string();
  s.node = allocation_.nodes.back().name;
  ASSERT_TRUE(launcher->start(s).ok());
  auto exits = wait_exits(*launcher, 1, 30s);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].describe(), "exited with code 3");
  const std::string log = read_file(dir_ / "fails.log");
  EXPECT_NE(log.find("failing on " + allocation_.nodes.back().name), std::string::npos) << log;
}

// An orchestrator that dies without stopping its workers (SIGKILL) must not leave steps running.
TEST_F(SlurmLive, StepsDieWithTheOrchestrator) {
  const fs::path log = dir_ / "orphan.log";
  const pid_t orchestrator = ::fork();
  ASSERT_GE(orchestrator, 0);
  if (orchestrator == 0) {
    auto launcher = make_slurm_launcher(allocation_);
    ProcessSpec s;
    s.name = "orphan";
    s.argv = {"/bin/sh", "-c", "echo started; exec sleep 120"};
    s.log_path = log.string();
    s.node = allocation_.nodes.back().name;
    if (!launcher->start(s).ok()) ::_exit(1);
    for (;;) ::pause();
  }
  testing::eventually([&] { return read_file(log).find("started") != std::string::npos; }, 30s, 50ms);
  ASSERT_NE(read_file(log).find("started"), std::string::npos) << read_file(log);
  ::kill(orchestrator, SIGKILL);
  ::waitpid(orchestrator, nullptr, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string left = steps_named("rlrun-orphan", 20s);
  EXPECT_EQ(left, "") << "the step outlived its orchestrator:\n" << left;
  std::printf("[slurm-live] orchestrator SIGKILLed -> its step gone after %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace rlrun::orchestrator
