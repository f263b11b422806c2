// reward_server_process.h - a reward server (examples/reward_server.py, or the test double
// tests/reference/faulty_reward_server.py) as a child process of a test, on a free loopback port.
//
//   auto server = RewardServerProcess::start("examples/reward_server.py", {});
//   ASSERT_TRUE(server->ok()) << server->log();
//   ... server->url() ...
//
// Started with orchestrator::spawn (python3 from PATH; standard library only), output to a log
// file; start() returns once the server printed its "listening on URL" line (at most 10 s). The
// destructor kills and reaps it.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "orchestrator/launch/spawn.h"
#include "tests/common/config_test_util.h"
#include "tests/common/eventually.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::testing {

class RewardServerProcess {
 public:
  // `script` relative to the source tree; `args` after it (--port 0 is added); `python`: the
  // interpreter (one with `openai` for examples/calculator_env.py).
  static std::unique_ptr<RewardServerProcess> start(const std::string& script, std::vector<std::string> args,
                                                    const std::string& python = "python3") {
    std::unique_ptr<RewardServerProcess> p(new RewardServerProcess());
    orchestrator::SpawnSpec spec;
    spec.argv = {python, std::string(RLRUN_SOURCE_DIR) + "/" + script, "--port", "0"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.search_path = true;
    spec.output = orchestrator::ChildOutput::kAppendToLog;
    spec.log_path = p->dir_.path() + "/server.log";
    spec.death_signal = SIGKILL;
    Result<orchestrator::Child> child = orchestrator::spawn(spec);
    if (!child.ok()) {
      p->error_ = child.status().message();
      return p;
    }
    p->pid_ = child->pid;
    constexpr std::string_view kListening = "listening on ";
    eventually([&] { return p->log().find(kListening) != std::string::npos || p->exited(); }, std::chrono::seconds(10));
    const std::string log = p->log();
    const size_t at = log.find(kListening);
    if (at == std::string::npos) {
      p->error_ = "the server did not say where it listens";
      return p;
    }
    const size_t begin = at + kListening.size();
    p->url_ = log.substr(begin, log.find('\n', begin) - begin);
    return p;
  }

  ~RewardServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  bool ok() const { return !url_.empty(); }
  const std::string& url() const { return url_; }  // "http://127.0.0.1:PORT/"
  std::string log() const { return read_all(dir_.path() + "/server.log") + error_; }

 private:
  RewardServerProcess() = default;

  bool exited() {
    if (pid_ <= 0) return true;
    if (::waitpid(pid_, nullptr, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }

  TempDir dir_;
  pid_t pid_ = -1;
  std::string url_, error_;
};

}  // namespace rlrun::testing
