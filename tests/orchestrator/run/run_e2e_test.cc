// `rlrun CONFIG` end to end: the real binary on configs/tiny.yaml, with its trainer and rollout
// worker processes, on loopback. Checks the outputs a user and a dashboard rely on.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/eventually.h"
#include "tests/orchestrator/cli_test_util.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>
#include <sstream>
#include <string>

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& p) { return testing::read_all(p.string()); }

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
    if (HasFailure()) return;  // keep the run folder and outputs to look at
    fs::remove_all(dir_);
    for (const char* suffix : {".out", ".bad", ".big"}) fs::remove(dir_.string() + suffix);
  }
  fs::path dir_;
};

TEST_F(RunEndToEnd, TinyConfigRunsEveryStepAndAccountsForEverySample) {
  const fs::path run = dir_ / "run";
  const int code = run_rlrun("configs/tiny.yaml --run-dir '" + run.string() +
                                 "' --set metrics_bind=127.0.0.1:0 --set task.eval_size=4"
                                 " --set heartbeat_timeout_seconds=60"
                                 // a random model rarely earns a reward: keep zero-spread groups
                                 " --set discard_group_zero_advantage=false"
                                 // two groups that fit in one row still make two minibatches
                                 " --set number_of_minibatches=2",
                             dir_.string() + ".out");
  const std::string output = read_file(dir_.string() + ".out");
  ASSERT_EQ(code, 0) << output;

  const json summary = json::parse(read_file(run / "summary.json"));
  for (const char* key : {"steps_completed", "wall_seconds", "samples", "reward_mean", "eval", "trainer_idle_fraction",
                          "rollout_idle_fraction", "tokens_per_second", "peak_memory_bytes", "worker_restarts", "exit"})
    EXPECT_TRUE(summary.contains(key)) << key;
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 3);
  EXPECT_TRUE(summary["cpu_threads"].is_null()) << "tiny.yaml sets cpu_threads_per_worker: the run does not balance";
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
    EXPECT_EQ(step["trainer"]["optimizer_steps"], 2) << line;
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
  EXPECT_TRUE(processes.count("rollout-0"));
  for (const char* span : {"wait_batch", "train", "weight_sync", "train_step", "weight_send", "generate", "weight_update"})
    EXPECT_TRUE(spans.count(span)) << span;
  EXPECT_TRUE(fs::exists(run / "config.yaml"));
  EXPECT_TRUE(fs::exists(run / "logs" / "trainer-0.log"));
  EXPECT_TRUE(fs::exists(run / "logs" / "rollout-0.log"));

  // The loop measured itself (profile.json) and `rlrun tune` predicts from it: the run's own
  // settings first, every candidate with its figures.
  ASSERT_TRUE(fs::exists(run / "profile.json"));
  const json profile = json::parse(read_file(run / "profile.json"));
  EXPECT_EQ(profile["train_steps"], 3);
  EXPECT_GT(profile["engine_step_costs"][0].get<double>(), 0) << "no rollout engine step was measured";
  EXPECT_TRUE(summary["tuning"].is_object()) << summary.dump(2);
  ASSERT_EQ(run_rlrun("tune '" + run.string() + "' --json", dir_.string() + ".tune"), 0)
      << read_file(dir_.string() + ".tune");
  const json tune = json::parse(read_file(dir_.string() + ".tune"));
  for (const char* key : {"prediction", "current", "recommended", "candidates"}) EXPECT_TRUE(tune.contains(key)) << key;
  EXPECT_EQ(tune["current"]["settings"]["inference_num_workers"], 1);
  ASSERT_FALSE(tune["candidates"].empty());
  for (const json& c : tune["candidates"]) {
    EXPECT_GT(c["seconds_per_step"].get<double>(), 0) << c.dump();
    EXPECT_GE(c["trainer_idle_fraction"].get<double>(), 0) << c.dump();
    EXPECT_LE(c["rollout_idle_fraction"].get<double>(), 1) << c.dump();
  }
  fs::remove(dir_.string() + ".tune");
}

// Starts a long tiny run in the background; returns once it has trained a step. The run's pid is
// in dir/pid, its exit code lands in dir/code, its output in dir/out.
void start_long_run(const fs::path& dir, const std::string& sets = "") {
  fs::create_directories(dir);
  const std::string cmd = std::string("cd '") + RLRUN_SOURCE_DIR + "' && (sh -c 'echo $$ > \"" + (dir / "pid").string() +
                          "\"; exec \"" + RLRUN_BINARY + "\" configs/tiny.yaml --run-dir \"" + (dir / "run").string() +
                          "\" --set number_of_steps=1000000 --set discard_group_zero_advantage=false" + sets + "' > '" +
                          (dir / "out").string() + "' 2>&1; echo $? > '" + (dir / "code").string() + "') &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  testing::eventually([&] { return !read_file(dir / "run" / "metrics.jsonl").empty(); }, std::chrono::seconds(60));
  ASSERT_FALSE(read_file(dir / "run" / "metrics.jsonl").empty()) << read_file(dir / "out");
}

// Waits for the background run's exit code.
int wait_exit(const fs::path& dir) {
  testing::eventually([&] { return !read_file(dir / "code").empty(); }, std::chrono::seconds(30));
  const std::string code = read_file(dir / "code");
  return code.empty() ? -1 : std::atoi(code.c_str());
}

// The pid the orchestrator logged for `worker` at registration ("rollout-0 registered (pid N").
int logged_pid(const std::string& out, const std::string& worker) {
  const std::string key = worker + " registered (pid ";
  const size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::atoi(out.c_str() + at + key.size());
}

// Bytes received by the kernel for `pid`'s TCP sockets and not yet read by it (rx_queue of
// /proc/net/tcp{,6} for the socket inodes among its open files).
int64_t bytes_waiting_for(int pid) {
  std::set<std::string> inodes;
  std::error_code gone;  // the process ended: nothing waits for it
  for (const auto& fd : fs::directory_iterator(fs::path("/proc") / std::to_string(pid) / "fd", gone)) {
    std::error_code ec;
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  int64_t waiting = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (!inodes.count(inode)) continue;
      waiting += std::stoll(queues.substr(queues.find(':') + 1), nullptr, 16);  // tx_queue:rx_queue
    }
  }
  return waiting;
}

// Without restarts (tests/orchestrator/run/fault_test.cc has the restarts).
// kl_reference_on: rollout. The rollout worker keeps the KL reference from the sync of version 0
// and scores every kept group on request: the trainer never runs the reference's forward pass
// (it copies the reference once, for checkpoints), the KL term is there from the second step, and
// the summary counts the groups each side scored.
TEST_F(RunEndToEnd, TheKlReferenceIsScoredOnTheRolloutWorker) {
  const fs::path run = dir_ / "kl";
  const int code = run_rlrun("configs/tiny.yaml --run-dir '" + run.string() +
                                 "' --set metrics_bind=127.0.0.1:0 --set heartbeat_timeout_seconds=60"
                                 " --set number_of_steps=4 --set kl_coef=0.1 --set kl_reference_on=rollout"
                                 // no reward on this task: the entropy bonus moves the policy
                                 " --set entropy_coef=0.5",
                             dir_.string() + ".out");
  ASSERT_EQ(code, 0) << read_file(dir_.string() + ".out");
  const json summary = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["samples"]["lost"], 0);
  const json& groups = summary["kl_reference_groups"];
  ASSERT_TRUE(groups.is_object()) << summary.dump(2);
  EXPECT_EQ(groups["scored_by_trainer"], 0) << summary.dump(2);
  // Every trained group was scored by the rollout worker (groups still waiting at exit are not trained).
  EXPECT_GE(groups["scored_by_rollout"].get<int64_t>() * 4, summary["samples"]["trained"].get<int64_t>());
  std::ifstream metrics(run / "metrics.jsonl");
  std::string line;
  int steps = 0;
  double ref_kl_after_first = 0;
  while (std::getline(metrics, line)) {
    const json step = json::parse(line);
    ++steps;
    // Capturing the reference (a copy) is all the trainer does for it: no forward pass.
    EXPECT_EQ(step["trainer"]["reference_tokens"], 0) << line;
    if (steps > 1) ref_kl_after_first += step["trainer"]["ref_kl"].get<double>();
  }
  EXPECT_EQ(steps, 4);
  EXPECT_GT(ref_kl_after_first, 0.0) << "the KL term must see the policy move away from the reference";
  EXPECT_NE(read_file(run / "logs" / "rollout-0.log").find("KL reference = weight version 0"), std::string::npos);
}

// balance_cpu_threads: a loop whose trainer never waits while its rollout worker idles (two-token
// completions of a wider model) lends the rollout's cores to the trainer, which computes the next
// steps with more threads; the next window judges the lend by the steps' time and keeps or undoes it.
// rollout_cpu_nice: the rollout worker runs at a lower CPU priority than the trainer (its log says
// the nice value it read back from the kernel; this test's own nice is inherited).
TEST_F(RunEndToEnd, IdleRolloutCoresAreLentToTheBusyTrainerAndJudgedByTheStepTime) {
  const fs::path run = dir_ / "cores";
  const int code = run_rlrun("configs/tiny.yaml --run-dir '" + run.string() +
                                 "' --set rollout_cpu_nice=3"
                                 " --set cpu_threads_per_worker=0 --set number_of_steps=40 --set max_tokens=2"
                                 " --set prompts_batch_size_for_trainer=8 --set group_size=8 --set max_async_rollout=2"
                                 " --set model.hidden_size=256 --set model.num_layers=4 --set model.intermediate_size=1024"
                                 " --set model.num_heads=4 --set model.num_kv_heads=2 --set max_num_seqs=64"
                                 " --set seq_len=512 --set heartbeat_timeout_seconds=60",
                             dir_.string() + ".out");
  ASSERT_EQ(code, 0) << read_file(dir_.string() + ".out");
  const json summary = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["samples"]["lost"], 0);
  const json& cores = summary["cpu_threads"];
  ASSERT_TRUE(cores.is_object()) << summary.dump(2);
  const int start = cores["start"]["trainer"].get<int>();
  ASSERT_GE(start, 1);
  const json& changes = cores["changes"];
  ASSERT_GE(changes.size(), 1u) << cores.dump(2);
  const int lent_after = changes[0]["after_step"].get<int>();
  EXPECT_GE(lent_after, 3) << "windows of >= 2 steps start after the first step (its wait is the first batch's)";
  const int borrowed = changes[0]["trainer"].get<int>();
  EXPECT_GT(borrowed, start) << cores.dump(2);
  EXPECT_EQ(changes[0]["rollout"], cores["start"]["rollout"]);
  EXPECT_NE(changes[0]["reason"].get<std::string>().find("each trainer rank takes"), std::string::npos);
  // What each step computed with, as the trainer reported it.
  std::vector<int> threads;
  std::ifstream metrics(run / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    threads.push_back(static_cast<int>(json::parse(line)["trainer"]["cpu_threads"].get<double>()));
  ASSERT_EQ(threads.size(), 40u);
  for (int step = 1; step <= lent_after; ++step) EXPECT_EQ(threads[step - 1], start) << "step " << step;
  EXPECT_EQ(threads[lent_after], borrowed) << "step " << lent_after + 1 << " computes with the borrowed threads";
  if (changes.size() >= 2) {  // the trial's verdict, from the window after the lend
    const std::string verdict = changes[1]["reason"];
    const int judged_after = changes[1]["after_step"].get<int>();
    ASSERT_LT(judged_after, 40);
    const bool paid = verdict.find("lending pays") != std::string::npos;
    EXPECT_TRUE(paid || verdict.find("lending did not pay") != std::string::npos) << verdict;
    EXPECT_EQ(threads[judged_after], paid ? borrowed : start) << verdict;
  }
  EXPECT_NE(read_file(run / "logs" / "trainer-0.log").find("computing with " + std::to_string(borrowed) + " thread(s)"),
            std::string::npos);
  const int nice_here = ::getpriority(PRIO_PROCESS, 0);
  EXPECT_NE(read_file(run / "logs" / "rollout-0.log").find(str("runs at nice ", std::min(19, nice_here + 3), " ")),
            std::string::npos);
  EXPECT_EQ(read_file(run / "logs" / "trainer-0.log").find("runs at nice"), std::string::npos);
}

TEST_F(RunEndToEnd, CrashedWorkerWithoutRestartsStopsTheRunNamingItAndItsLog) {
  start_long_run(dir_, " --set max_worker_restarts=0");
  const int pid = logged_pid(read_file(dir_ / "out"), "rollout-0");
  ASSERT_GT(pid, 0) << read_file(dir_ / "out");
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_EQ(wait_exit(dir_), 1);
  const json summary = json::parse(read_file(dir_ / "run" / "summary.json"));
  const std::string exit = summary["exit"];
  EXPECT_NE(exit.find("rollout-0"), std::string::npos) << exit;
  EXPECT_NE(exit.find("logs/rollout-0.log"), std::string::npos) << exit;
  EXPECT_EQ(summary["samples"]["lost"], 0);
  EXPECT_GT(summary["steps_completed"].get<int64_t>(), 0);
}

TEST_F(RunEndToEnd, InterruptWritesTheSummaryAndStopsTheWorkers) {
  start_long_run(dir_);
  const int orchestrator = std::atoi(read_file(dir_ / "pid").c_str());
  const int trainer = logged_pid(read_file(dir_ / "out"), "trainer-0");
  ASSERT_GT(orchestrator, 0);
  ASSERT_GT(trainer, 0);
  ASSERT_EQ(::kill(orchestrator, SIGINT), 0);
  EXPECT_EQ(wait_exit(dir_), 1);
  const json summary = json::parse(read_file(dir_ / "run" / "summary.json"));
  EXPECT_EQ(summary["exit"], "interrupted");
  EXPECT_EQ(summary["samples"]["lost"], 0);
  EXPECT_TRUE(testing::eventually([&] { return ::kill(trainer, 0) != 0; }, std::chrono::seconds(3)))
      << "trainer-0 outlived the run";
}

// A stopped trainer holds the step in training, which the first interrupt waits for; the second
// stops the run at once, and summary.json is still written.
TEST_F(RunEndToEnd, SecondInterruptStopsAtOnceAndStillWritesTheSummary) {
  start_long_run(dir_);
  const int orchestrator = std::atoi(read_file(dir_ / "pid").c_str());
  const int trainer = logged_pid(read_file(dir_ / "out"), "trainer-0");
  ASSERT_GT(orchestrator, 0);
  ASSERT_GT(trainer, 0);
  ASSERT_EQ(::kill(trainer, SIGSTOP), 0);
  // The orchestrator has sent the stopped trainer its next step (or that step's weight sync) once
  // bytes wait in the trainer's sockets: a stopped process sends nothing that would be answered.
  ASSERT_TRUE(testing::eventually([&] { return bytes_waiting_for(trainer) > 0; }, std::chrono::seconds(30)))
      << "the orchestrator never sent the stopped trainer a step";
  ASSERT_EQ(::kill(orchestrator, SIGINT), 0);
  EXPECT_FALSE(testing::eventually([&] { return !read_file(dir_ / "code").empty(); }, std::chrono::milliseconds(300)))
      << "the first interrupt must wait for the step in training";
  ASSERT_EQ(::kill(orchestrator, SIGINT), 0);
  EXPECT_EQ(wait_exit(dir_), 1) << read_file(dir_ / "out");
  const json summary = json::parse(read_file(dir_ / "run" / "summary.json"));
  EXPECT_EQ(summary["exit"], "interrupted");
  EXPECT_EQ(summary["samples"]["lost"], 0);
  EXPECT_TRUE(testing::eventually([&] { return ::kill(trainer, 0) != 0; }, std::chrono::seconds(3)))
      << "the stopped trainer-0 outlived the run";
}

TEST_F(RunEndToEnd, BadConfigExitsTwoNamingTheKey) {
  const int code = run_rlrun("configs/tiny.yaml --set max_async_rollot=1 --run-dir '" + (dir_ / "bad").string() + "'",
                             dir_.string() + ".bad");
  const std::string output = read_file(dir_.string() + ".bad");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("max_async_rollot"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "summary.json"));
}

TEST_F(RunEndToEnd, PlanThatCannotFitIsRefusedBeforeAnythingStarts) {
  // a ~0.3B-parameter model planned for a 0.25 GiB GPU: no trainer rank fits
  const std::string sets = " --set backend=cuda --set device_memory_gb=0.25 --set model.hidden_size=1024"
                           " --set model.num_layers=24 --set model.intermediate_size=4096";
  const int code = run_rlrun("configs/tiny.yaml" + sets + " --run-dir '" + (dir_ / "big").string() + "'",
                             dir_.string() + ".big");
  const std::string output = read_file(dir_.string() + ".big");
  EXPECT_EQ(code, 3) << output;
  EXPECT_NE(output.find("levers, cheapest first"), std::string::npos) << output;
  EXPECT_NE(output.find("gradient_checkpointing=true"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(dir_ / "big")) << "nothing may start, not even the run folder";
}

}  // namespace
}  // namespace rlrun::orchestrator
