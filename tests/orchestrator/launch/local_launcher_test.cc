// The local launcher with real processes (/bin/sh).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "orchestrator/launch/launcher.h"
#include "tests/common/eventually.h"
#include "tests/common/process_ended.h"

namespace rlrun::orchestrator {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class LocalLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlrun_launcher_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ProcessSpec sh(const std::string& name, const std::string& script) {
    return {name, {"/bin/sh", "-c", script}, {{"RLRUN_TEST_VAR", "hello"}}, (dir_ / (name + ".log")).string(), "", {}};
  }
  std::vector<ProcessExit> wait_exits(Launcher& l, size_t n) {
    std::vector<ProcessExit> all;
    testing::eventually([&] {
      for (auto& e : l.poll_exits()) all.push_back(e);
      return all.size() >= n;
    }, 5s);
    return all;
  }
  std::string read(const std::string& name) {
    std::ifstream in(dir_ / (name + ".log"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST_F(LocalLauncherTest, LogsEnvironmentAndExitCodes) {
  auto l = make_local_launcher();
  ASSERT_TRUE(l->start(sh("ok", "echo out $RLRUN_TEST_VAR; echo err >&2; exit 0")).ok());
  ASSERT_TRUE(l->start(sh("bad", "exit 3")).ok());
  auto exits = wait_exits(*l, 2);
  ASSERT_EQ(exits.size(), 2u);
  for (const ProcessExit& e : exits) {
    if (e.name == "ok") {
      EXPECT_EQ(e.exit_code, 0);
    } else {
      EXPECT_EQ(e.describe(), "exited with code 3");
    }
  }
  EXPECT_EQ(read("ok"), "out hello\nerr\n");
  EXPECT_EQ(l->live_count(), 0u);
}

// A worker that cannot be run is an error of start(), naming it, not an exit with code 127.
TEST_F(LocalLauncherTest, AMissingProgramIsAnErrorOfStart) {
  auto l = make_local_launcher();
  const Status st = l->start({"w", {"/nonexistent/rlrun", "rollout"}, {}, (dir_ / "w.log").string(), "", {}});
  EXPECT_EQ(st.message(), "process w: cannot run /nonexistent/rlrun: No such file or directory");
  EXPECT_EQ(l->live_count(), 0u);
}

TEST_F(LocalLauncherTest, KillAndStopAll) {
  auto l = make_local_launcher();
  ASSERT_TRUE(l->start(sh("a", "exec sleep 30")).ok());
  ASSERT_TRUE(l->start(sh("b", "trap '' TERM; exec sleep 30")).ok());  // ignores SIGTERM
  EXPECT_FALSE(l->start(sh("a", "true")).ok());                    // names are unique
  ASSERT_TRUE(l->kill("a").ok());
  auto exits = wait_exits(*l, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].signal, SIGKILL);
  EXPECT_NE(exits[0].describe().find("SIGKILL"), std::string::npos);
  auto t0 = std::chrono::steady_clock::now();
  l->stop_all(300ms);  // b survives SIGTERM and is killed after the grace period
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(l->live_count(), 0u);
}

TEST_F(LocalLauncherTest, WorkersAreInTheirOwnProcessGroup) {
  auto l = make_local_launcher();
  ASSERT_TRUE(l->start(sh("g1", "ps -o pgid= -p $$ > " + (dir_ / "pg1").string() + "; exec sleep 30")).ok());
  ASSERT_TRUE(l->start(sh("g2", "ps -o pgid= -p $$ > " + (dir_ / "pg2").string() + "; exec sleep 30")).ok());
  std::string pg1, pg2;
  ASSERT_TRUE(testing::eventually([&] {
    std::ifstream(dir_ / "pg1") >> pg1;
    std::ifstream(dir_ / "pg2") >> pg2;
    return !pg1.empty() && !pg2.empty();
  }, 3s));
  EXPECT_EQ(pg1, pg2);
  EXPECT_NE(std::stoi(pg1), ::getpgrp());
  l->stop_all(1s);
}

TEST_F(LocalLauncherTest, WorkersDieWithTheOrchestrator) {
  // A child process plays the orchestrator: it launches a worker, then is SIGKILLed.
  const fs::path pidfile = dir_ / "worker.pid";
  pid_t orchestrator = ::fork();
  ASSERT_GE(orchestrator, 0);
  if (orchestrator == 0) {
    auto l = make_local_launcher();
    Status s = l->start(sh("w", "echo $$ > " + pidfile.string() + "; exec sleep 30"));
    if (!s.ok()) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  std::string worker;
  ASSERT_TRUE(testing::eventually([&] { return static_cast<bool>(std::ifstream(pidfile) >> worker); }, 3s));
  ::kill(orchestrator, SIGKILL);
  ::waitpid(orchestrator, nullptr, 0);
  const bool gone = testing::eventually([&] { return testing::process_ended(std::stoi(worker)); }, 3s);
  EXPECT_TRUE(gone) << "worker " << worker << " outlived its orchestrator";
}

}  // namespace
}  // namespace rlrun::orchestrator
