// run_resume_util.h - the real `rlrun` run in the background, killed, stopped and resumed, for the
// resume and checkpoint-fault tests (configs/tiny.yaml with its worker processes, on loopback).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/common/eventually.h"
#include "tests/common/process_ended.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator::resume_test {

namespace fs = std::filesystem;
using nlohmann::json;

inline std::string read_file(const fs::path& p) { return testing::read_all(p.string()); }

// Synchronous generation (max_async_rollout 0) keeps the data order exact; zero-spread groups are
// kept so that which prompts train does not depend on what a random model generates.
inline const std::string kTiny =
    "configs/tiny.yaml --set metrics_bind=127.0.0.1:0 --set discard_group_zero_advantage=false"
    " --set max_async_rollout=0 --set checkpoint_keep_last=0 --set heartbeat_timeout_seconds=5";

// A path for the shell, in double quotes: background runs go inside sh -c '...'.
inline std::string q(const fs::path& p) {
  std::string out(1, '"');
  out += p.string();
  out += '"';
  return out;
}

// Runs rlrun from the source folder (the config's relative paths); returns its exit code.
inline int run_rlrun(const std::string& args, const fs::path& output) {
  const std::string cmd = std::string("cd '") + RLRUN_SOURCE_DIR + "' && '" + RLRUN_BINARY + "' " + args + " > '" +
                          output.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A run in the background: its pid lands in dir/pid, its exit code in dir/code, output in dir/out.
inline void start_run(const fs::path& dir, const std::string& args) {
  fs::create_directories(dir);
  const std::string cmd = std::string("cd '") + RLRUN_SOURCE_DIR + "' && (sh -c 'echo $$ > \"" +
                          (dir / "pid").string() + "\"; exec \"" + RLRUN_BINARY + "\" " + args + "' > '" +
                          (dir / "out").string() + "' 2>&1; echo $? > '" + (dir / "code").string() + "') &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

inline int count_lines(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += !line.empty();
  return n;
}

// Waits until metrics.jsonl has `steps` lines (false after 60 s).
inline bool wait_for_steps(const fs::path& run, int steps) {
  return testing::eventually([&] { return count_lines(run / "metrics.jsonl") >= steps; }, std::chrono::seconds(60));
}

inline int wait_exit(const fs::path& dir) {
  testing::eventually([&] { return !read_file(dir / "code").empty(); }, std::chrono::seconds(60));
  const std::string code = read_file(dir / "code");
  return code.empty() ? -1 : std::atoi(code.c_str());
}

// The pid the orchestrator logged for `worker` at registration ("trainer-0 registered (pid N").
inline int logged_pid(const std::string& out, const std::string& worker) {
  const std::string key = worker + " registered (pid ";
  const size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::atoi(out.c_str() + at + key.size());
}

// Alive and not a zombie (an orphan's zombie may wait for a reaper that never comes).
inline bool alive(int pid) { return !testing::process_ended(pid); }

// Waits up to `seconds` for every pid to be gone; returns those still alive.
inline std::vector<int> survivors(const std::vector<int>& pids, double seconds) {
  std::vector<int> left;
  const auto none_alive = [&] {
    left.clear();
    for (int pid : pids)
      if (alive(pid)) left.push_back(pid);
    return left.empty();
  };
  testing::eventually(none_alive, std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  return left;
}

// metrics.jsonl as one JSON object per line.
inline std::vector<json> metrics_lines(const fs::path& run) {
  std::vector<json> out;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

class RunResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlrun_resume_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);  // kept to look at otherwise
  }
  fs::path dir_;
};

}  // namespace rlrun::orchestrator::resume_test
