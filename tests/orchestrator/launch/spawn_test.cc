// The spawner with real processes: output capture and logs, environment, process groups, the
// death signal, stdin, and the errors a program that cannot run gives.
#include "orchestrator/launch/spawn.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/common/eventually.h"
#include "tests/common/process_ended.h"

namespace rlrun::orchestrator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class SpawnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlrun_spawn_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The wait status of child `pid` once it has exited (-1 if it has not within 5 s).
  static int wait_exit(pid_t pid) {
    int status = -1;
    testing::eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 5s);
    return status;
  }
  // Everything read from `fd` up to end of file; closes it.
  static std::string read_all(int fd) {
    std::string text;
    char buf[4096];
    for (ssize_t got; (got = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(got));
    ::close(fd);
    return text;
  }
  static std::string read_file(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static bool ended(pid_t pid) { return testing::process_ended(pid); }

  fs::path dir_;
};

TEST_F(SpawnTest, CapturesStdoutAndStderr) {
  SpawnSpec spec;
  spec.argv = {"/bin/echo", "hello", "world"};
  spec.output = ChildOutput::kCapture;
  Result<Child> child = spawn(spec);
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  EXPECT_EQ(read_all(child->stdout_fd), "hello world\n");
  EXPECT_EQ(read_all(child->stderr_fd), "");
  const int status = wait_exit(child->pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(SpawnTest, AppendsBothStreamsToTheLog) {
  const fs::path log = dir_ / "worker.log";
  std::ofstream(log) << "before\n";
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo out; echo err >&2"};
  spec.output = ChildOutput::kAppendToLog;
  spec.log_path = log.string();
  for (int i = 0; i < 2; ++i) {
    Result<Child> child = spawn(spec);
    ASSERT_TRUE(child.ok()) << child.status().to_string();
    EXPECT_EQ(child->stdout_fd, -1);
    EXPECT_EQ(wait_exit(child->pid), 0);
  }
  EXPECT_EQ(read_file(log), "before\nout\nerr\nout\nerr\n");
  spec.log_path = (dir_ / "missing" / "worker.log").string();
  Result<Child> unopened = spawn(spec);
  ASSERT_FALSE(unopened.ok());
  EXPECT_THAT(unopened.status().message(), HasSubstr(spec.log_path + ": cannot open log file"));
}

TEST_F(SpawnTest, EnvironmentAdditionsReplaceInheritedValues) {
  ::setenv("RLRUN_SPAWN_INHERITED", "inherited", 1);
  ::setenv("RLRUN_SPAWN_REPLACED", "old", 1);
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo $RLRUN_SPAWN_INHERITED $RLRUN_SPAWN_ADDED $RLRUN_SPAWN_REPLACED"};
  spec.env = {{"RLRUN_SPAWN_ADDED", "added"}, {"RLRUN_SPAWN_REPLACED", "new"}};
  spec.output = ChildOutput::kCapture;
  Result<Child> child = spawn(spec);
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  EXPECT_EQ(read_all(child->stdout_fd), "inherited added new\n");
  ::close(child->stderr_fd);
  wait_exit(child->pid);

  spec.argv = {"/usr/bin/env"};
  spec.inherit_environment = false;
  spec.env = {{"ONLY", "this"}};
  child = spawn(spec);
  ASSERT_TRUE(child.ok()) << child.status().to_string();
  EXPECT_EQ(read_all(child->stdout_fd), "ONLY=this\n");
  ::close(child->stderr_fd);
  wait_exit(child->pid);
  ::unsetenv("RLRUN_SPAWN_INHERITED");
  ::unsetenv("RLRUN_SPAWN_REPLACED");
}

TEST_F(SpawnTest, AProgramThatCannotRunIsAnErrorNamingIt) {
  SpawnSpec spec;
  spec.argv = {"/nonexistent/rlrun-no-such-program", "--flag"};
  Result<Child> missing = spawn(spec);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "cannot run /nonexistent/rlrun-no-such-program: No such file or directory");

  spec.argv = {"rlrun-no-such-program"};
  spec.search_path = true;
  missing = spawn(spec);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot run rlrun-no-such-program: not found in PATH ("));

  const fs::path not_executable = dir_ / "script.sh";
  std::ofstream(not_executable) << "#!/bin/sh\necho hi\n";
  ::chmod(not_executable.c_str(), 0644);
  spec.argv = {not_executable.string()};
  Result<Child> denied = spawn(spec);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().message(), "cannot run " + not_executable.string() + ": Permission denied");

  spec.argv.clear();
  EXPECT_FALSE(spawn(spec).ok());
}

TEST_F(SpawnTest, StdinIsDevNull) {
  Result<std::string> stdin_target = run_and_capture({"readlink", "/proc/self/fd/0"});
  ASSERT_TRUE(stdin_target.ok()) << stdin_target.status().to_string();
  EXPECT_EQ(*stdin_target, "/dev/null\n");
}

TEST_F(SpawnTest, ChildrenDoNotInheritIgnoredSigpipeOrBlockedSignals) {
  // rlrun's main ignores SIGPIPE; its children must get the default action back.
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  sigset_t term, previous_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &term, &previous_mask);
  Result<std::string> status = run_and_capture({"grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"});
  ::sigprocmask(SIG_SETMASK, &previous_mask, nullptr);
  ::sigaction(SIGPIPE, &previous, nullptr);
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  std::istringstream lines(*status);
  for (std::string key, mask; lines >> key >> mask;) {
    const unsigned long long bits = std::stoull(mask, nullptr, 16);
    if (key == "SigIgn:") {
      EXPECT_EQ(bits & (1ull << (SIGPIPE - 1)), 0u) << "SIGPIPE is still ignored";
    }
    if (key == "SigBlk:") {
      EXPECT_EQ(bits, 0u) << "blocked signals: " << mask;
    }
  }
}

TEST_F(SpawnTest, ProcessGroups) {
  SpawnSpec sleeper;
  sleeper.argv = {"sleep", "30"};
  sleeper.search_path = true;
  sleeper.process_group = kNewGroup;
  Result<Child> leader = spawn(sleeper);
  ASSERT_TRUE(leader.ok()) << leader.status().to_string();
  EXPECT_EQ(leader->process_group, leader->pid);
  EXPECT_EQ(::getpgid(leader->pid), leader->pid);

  sleeper.process_group = leader->pid;
  Result<Child> member = spawn(sleeper);
  ASSERT_TRUE(member.ok()) << member.status().to_string();
  EXPECT_EQ(member->process_group, leader->pid);

  sleeper.process_group = kParentGroup;
  Result<Child> same = spawn(sleeper);
  ASSERT_TRUE(same.ok()) << same.status().to_string();
  EXPECT_EQ(same->process_group, ::getpgrp());

  for (pid_t pid : {leader->pid, member->pid, same->pid}) {
    ::kill(pid, SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(wait_exit(pid)));
  }
  // The group has no member left: the next child leads a new one, even if it exits at once.
  SpawnSpec quick;
  quick.argv = {"/bin/true"};
  quick.process_group = leader->pid;
  Result<Child> lone = spawn(quick);
  ASSERT_TRUE(lone.ok()) << lone.status().to_string();
  EXPECT_EQ(lone->process_group, lone->pid);
  EXPECT_EQ(wait_exit(lone->pid), 0);
}

TEST_F(SpawnTest, TheChildGetsItsDeathSignalWhenItsParentDies) {
  for (int signal : {SIGTERM, SIGKILL}) {
    // A middle process spawns the sleeper, reports its pid, and is SIGKILLed.
    int report[2];
    ASSERT_EQ(::pipe(report), 0);
    const pid_t middle = ::fork();
    ASSERT_GE(middle, 0);
    if (middle == 0) {
      ::close(report[0]);
      SpawnSpec spec;
      spec.argv = {"sleep", "30"};
      spec.search_path = true;
      spec.death_signal = signal;
      Result<Child> child = spawn(spec);
      if (!child.ok()) ::_exit(1);
      if (::write(report[1], &child->pid, sizeof child->pid) != sizeof child->pid) ::_exit(1);
      ::pause();
      ::_exit(0);
    }
    ::close(report[1]);
    pid_t sleeper = -1;
    ASSERT_EQ(::read(report[0], &sleeper, sizeof sleeper), static_cast<ssize_t>(sizeof sleeper));
    ::close(report[0]);
    EXPECT_FALSE(ended(sleeper));
    ::kill(middle, SIGKILL);
    ::waitpid(middle, nullptr, 0);
    const bool gone = testing::eventually([&] { return ended(sleeper); }, 3s);
    EXPECT_TRUE(gone) << "sleeper " << sleeper << " outlived its parent (death signal " << signal << ")";
    if (!gone) ::kill(sleeper, SIGKILL);
  }
}

TEST_F(SpawnTest, RunAndCaptureReturnsStdoutOrAnErrorWithStderr) {
  Result<std::string> out = run_and_capture({"/bin/sh", "-c", "echo hello; echo noise >&2"});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "hello\n");
  Result<std::string> failed = run_and_capture({"/bin/sh", "-c", "echo why >&2; exit 3"});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "`/bin/sh -c echo why >&2; exit 3` exited with code 3: why");
  Result<std::string> killed = run_and_capture({"/bin/sh", "-c", "kill -9 $$"});
  ASSERT_FALSE(killed.ok());
  EXPECT_THAT(killed.status().message(), HasSubstr("was killed by signal 9: no message"));
  Result<std::string> missing = run_and_capture({"/nonexistent/scontrol", "show"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/scontrol"));
}

TEST_F(SpawnTest, RunAndCaptureReadsBothPipesWithoutStalling) {
  // Far more than a pipe holds (64 KiB) on each stream: reading one to its end first would hang.
  Result<std::string> out =
      run_and_capture({"/bin/sh", "-c", "head -c 300000 /dev/zero >&2; head -c 500000 /dev/zero; head -c 300000 /dev/zero >&2"});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->size(), 500000u);
}

TEST_F(SpawnTest, RunAndCaptureGivesUpAtItsTimeoutAndEndsWhatItStarted) {
  // The shell's background sleep holds the pipes open: it has to go with the timeout too.
  const fs::path pidfile = dir_ / "background.pid";
  const auto start = std::chrono::steady_clock::now();
  Result<std::string> out =
      run_and_capture({"/bin/sh", "-c", "sleep 30 & echo $! > " + pidfile.string() + "; wait"}, 1s);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kTimeout);
  EXPECT_THAT(out.status().message(), HasSubstr("did not finish within 1000 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  pid_t background = -1;
  ASSERT_TRUE(std::ifstream(pidfile) >> background);
  EXPECT_TRUE(testing::eventually([&] { return ended(background); }, 3s)) << "sleep " << background << " outlived it";
}

}  // namespace
}  // namespace rlrun::orchestrator
