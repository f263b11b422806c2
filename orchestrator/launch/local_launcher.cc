#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/exit_codes.h"
#include "common/observe/log.h"
#include "orchestrator/launch/launcher.h"

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
    int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return io_error(str(spec.log_path, ": cannot open log file: ", std::strerror(errno)));
    // Prepared before fork: the child may only call async-signal-safe functions.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      std::string key = kv.substr(0, kv.find('='));
      if (!spec.env.count(key) && !(key == "CUDA_VISIBLE_DEVICES" && !spec.gpus.empty())) env_strings.push_back(kv);
    }
    for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
    if (!spec.gpus.empty()) {
      std::string devices;
      for (size_t i = 0; i < spec.gpus.size(); ++i) devices = str(devices, i ? "," : "", spec.gpus[i]);
      env_strings.push_back("CUDA_VISIBLE_DEVICES=" + devices);
    }
    std::vector<char*> argv, envp;
    for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();

    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(log_fd);
      return unavailable(str("process ", spec.name, ": fork failed: ", std::strerror(errno)));
    }
    if (pid == 0) {
      // join the workers' group; if its members are all gone, start a new one
      if (group_ == 0 || ::setpgid(0, group_) != 0) ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(kExitCannotExec);  // the orchestrator died before prctl took effect
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      const char msg[] = "rlrun launcher: exec failed\n";
      ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)ignored;
      ::_exit(kExitCannotExec);
    }
    ::close(log_fd);
    // the same from the parent's side, so the group is set whichever runs first
    if (group_ == 0 || ::setpgid(pid, group_) != 0) {
      ::setpgid(pid, pid);
      group_ = pid;
    }
    live_[pid] = spec.name;
    log::debug(str("started ", spec.name, " (pid ", pid, ")"));
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
  pid_t group_ = 0;  // process group of all workers: the first worker's pid
};

}  // namespace

std::unique_ptr<Launcher> make_local_launcher() { return std::make_unique<LocalLauncher>(); }

}  // namespace rlrun::orchestrator
