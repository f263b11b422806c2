#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <thread>

#include "common/observe/log.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/launch/spawn.h"

namespace rlrun::orchestrator {

std::string ProcessExit::describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return str("killed by signal ", signal, " (SIG", name ? name : "?", ")");
  }
  return str("exited with code ", exit_code);
}

namespace {

class LocalLauncher : public Launcher {
 public:
  ~LocalLauncher() override { stop_all(std::chrono::milliseconds(2000)); }

  Status start(const ProcessSpec& spec) override {
    if (spec.argv.empty()) return invalid_argument(str("process ", spec.name, ": empty command"));
    for (const auto& [pid, name] : live_) {
      if (name == spec.name) return invalid_argument(str("process ", spec.name, " is already running"));
    }
    SpawnSpec s;
    s.argv = spec.argv;
    s.env = spec.env;
    if (!spec.gpus.empty()) {
      std::string devices;
      for (size_t i = 0; i < spec.gpus.size(); ++i) devices = str(devices, i ? "," : "", spec.gpus[i]);
      s.env["CUDA_VISIBLE_DEVICES"] = devices;
    }
    s.output = ChildOutput::kAppendToLog;
    s.log_path = spec.log_path;
    s.process_group = group_;  // joins the workers' group, or leads a new one when all have gone
    s.death_signal = SIGKILL;
    Result<Child> child = spawn(s);
    if (!child.ok()) return child.status().with_context(str("process ", spec.name));
    group_ = child->process_group;
    live_[child->pid] = spec.name;
    log::debug(str("started ", spec.name, " (pid ", child->pid, ")"));
    return Status();
  }

  std::vector<ProcessExit> poll_exits() override {
    std::vector<ProcessExit> exits;
    for (auto it = live_.begin(); it != live_.end();) {
      int status = 0;
      pid_t r = ::waitpid(it->first, &status, WNOHANG);
      if (r == it->first) {
        ProcessExit e;
        e.name = it->second;
        if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
        if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
        exits.push_back(e);
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    return exits;
  }

  Status kill(const std::string& name) override {
    for (const auto& [pid, n] : live_) {
      if (n == name) {
        ::kill(pid, SIGKILL);
        return Status();
      }
    }
    return not_found(str("no live process named ", name));
  }

  void stop_all(std::chrono::milliseconds grace) override {
    if (live_.empty()) return;
    for (const auto& [pid, name] : live_) ::kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!live_.empty() && std::chrono::steady_clock::now() < deadline) {
      poll_exits();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (const auto& [pid, name] : live_) {
      log::warn(str(name, " did not stop within ", grace.count(), " ms: SIGKILL"));
      ::kill(pid, SIGKILL);
    }
    for (const auto& [pid, name] : live_) ::waitpid(pid, nullptr, 0);
    live_.clear();
  }

  size_t live_count() const override { return live_.size(); }

 private:
  std::map<pid_t, std::string> live_;
  pid_t group_ = kNewGroup;  // the workers' process group, once one has started
};

}  // namespace

std::unique_ptr<Launcher> make_local_launcher() { return std::make_unique<LocalLauncher>(); }

}  // namespace rlrun::orchestrator
