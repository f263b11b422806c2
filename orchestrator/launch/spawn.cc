#include "orchestrator/launch/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "common/check.h"
#include "common/exit_codes.h"
#include "common/observe/log.h"

extern char** environ;

namespace rlrun::orchestrator {
namespace {

using Clock = std::chrono::steady_clock;

// The parent's side of a file descriptor: closed when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

Status make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return io_error(str("pipe: ", std::strerror(errno)));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return Status();
}

// `name` when it holds a '/', else the first executable file DIR/name for DIR on PATH (as
// execvp looks, but here, before fork, so that "not found" is an error of its own).
Result<std::string> find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (end == dirs.size()) break;
    start = end + 1;
  }
  return not_found(str("cannot run ", name, ": not found in PATH (", dirs, ")"));
}

std::vector<std::string> environment(const SpawnSpec& spec) {
  std::vector<std::string> vars;
  if (spec.inherit_environment) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view kv = *e;
      if (spec.env.count(std::string(kv.substr(0, kv.find('=')))) == 0) vars.emplace_back(kv);
    }
  }
  for (const auto& [key, value] : spec.env) vars.push_back(key + "=" + value);
  return vars;
}

// argv/envp for execve: pointers into `strings`, which must outlive them, ending in nullptr.
std::vector<char*> exec_array(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// What the child writes to the status pipe when a step before exec fails (then it exits 127).
struct ChildFailure {
  enum Step : int { kRedirect, kExec } step;
  int error;  // errno
};

// Everything the child needs, prepared before fork.
struct ChildSetup {
  const char* path;
  char* const* argv;
  char* const* envp;
  int stdin_fd;              // /dev/null
  int stdout_fd, stderr_fd;  // -1: inherit
  pid_t process_group;
  int death_signal;
  pid_t parent;
  int status_fd;  // write end of the status pipe (close-on-exec)
  sigset_t no_signals;
};

// dup2, except that a descriptor already in place must lose its close-on-exec flag instead.
bool move_fd(int from, int to) {
  if (from == to) return ::fcntl(to, F_SETFD, 0) == 0;
  return ::dup2(from, to) == to;
}

[[noreturn]] void fail_in_child(int status_fd, ChildFailure::Step step) {
  const ChildFailure failure{step, errno};
  ssize_t ignored = ::write(status_fd, &failure, sizeof failure);  // atomic: below PIPE_BUF
  (void)ignored;
  ::_exit(kExitCannotExec);
}

// The child, between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const ChildSetup& s) {
  if (s.process_group != kParentGroup) {
    if (s.process_group == kNewGroup || ::setpgid(0, s.process_group) != 0) ::setpgid(0, 0);
  }
  if (s.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, s.death_signal);
    if (::getppid() != s.parent) ::_exit(kExitCannotExec);  // the parent died before prctl took effect
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &default_action, nullptr);
  ::sigprocmask(SIG_SETMASK, &s.no_signals, nullptr);
  if (!move_fd(s.stdin_fd, STDIN_FILENO) || (s.stdout_fd >= 0 && !move_fd(s.stdout_fd, STDOUT_FILENO)) ||
      (s.stderr_fd >= 0 && !move_fd(s.stderr_fd, STDERR_FILENO))) {
    fail_in_child(s.status_fd, ChildFailure::kRedirect);
  }
  ::execve(s.path, s.argv, s.envp);
  fail_in_child(s.status_fd, ChildFailure::kExec);
}

// Reads up to `size` bytes, until end of file; the count read.
size_t read_fully(int fd, void* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(fd, static_cast<char*>(data) + done, size - done);
    if (got > 0) {
      done += static_cast<size_t>(got);
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  return done;
}

}  // namespace

Result<Child> spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return invalid_argument("cannot start a process with an empty command");
  const std::string& program = spec.argv[0];
  std::string path = program;
  if (spec.search_path) {
    RLRUN_ASSIGN_OR_RETURN(path, find_program(program));
  }
  std::vector<std::string> args = spec.argv, vars = environment(spec);
  const std::vector<char*> argv = exec_array(args), envp = exec_array(vars);

  Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_in.get() < 0) return io_error(str("cannot start ", program, ": /dev/null: ", std::strerror(errno)));
  Fd log, out_read, out_write, err_read, err_write, status_read, status_write;
  if (spec.output == ChildOutput::kAppendToLog) {
    log.reset(::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (log.get() < 0) return io_error(str(spec.log_path, ": cannot open log file: ", std::strerror(errno)));
  } else if (spec.output == ChildOutput::kCapture) {
    RLRUN_RETURN_IF_ERROR(make_pipe(out_read, out_write));
    RLRUN_RETURN_IF_ERROR(make_pipe(err_read, err_write));
  }
  RLRUN_RETURN_IF_ERROR(make_pipe(status_read, status_write));
  ChildSetup setup{path.c_str(), argv.data(), envp.data(), null_in.get(), -1, -1, spec.process_group,
                   spec.death_signal, ::getpid(), status_write.get(), {}};
  if (spec.output == ChildOutput::kAppendToLog) {
    setup.stdout_fd = setup.stderr_fd = log.get();
  } else if (spec.output == ChildOutput::kCapture) {
    setup.stdout_fd = out_write.get();
    setup.stderr_fd = err_write.get();
  }
  sigemptyset(&setup.no_signals);

  const pid_t pid = ::fork();
  if (pid < 0) return unavailable(str("cannot start ", program, ": fork: ", std::strerror(errno)));
  if (pid == 0) exec_child(setup);

  // The status pipe ends at the child's exec (close-on-exec), or carries why it did not exec.
  status_write.reset();
  out_write.reset();
  err_write.reset();
  ChildFailure failure{};
  if (read_fully(status_read.get(), &failure, sizeof failure) == sizeof failure) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {  // it is exiting already
    }
    const std::string why = std::strerror(failure.error);
    if (failure.step == ChildFailure::kRedirect) {
      return io_error(str("cannot start ", program, ": redirecting its standard streams: ", why));
    }
    if (failure.error == ENOENT) return not_found(str("cannot run ", path, ": ", why));
    return unavailable(str("cannot run ", path, ": ", why));
  }
  Child child;
  child.pid = pid;
  child.process_group = ::getpgid(pid);  // set by the child before exec, which is behind us
  child.stdout_fd = out_read.release();
  child.stderr_fd = err_read.release();
  return child;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Appends what arrives on `pipes` (stdout, stderr) to `text` until both are closed and `pid` has
// exited (true, its wait status in *status), or until `deadline` (false).
bool collect(pid_t pid, Fd (&pipes)[2], std::string (&text)[2], Clock::time_point deadline, int* status) {
  pollfd fds[2] = {{pipes[0].get(), POLLIN, 0}, {pipes[1].get(), POLLIN, 0}};
  char buf[4096];
  for (;;) {
    const bool reading = fds[0].fd >= 0 || fds[1].fd >= 0;
    if (!reading && ::waitpid(pid, status, WNOHANG) == pid) return true;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    if (!reading) {  // it closed its output but has not exited yet
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(5)));
      continue;
    }
    const int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    RLRUN_CHECK(ready >= 0 || errno == EINTR, str("poll: ", std::strerror(errno)));
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        text[i].append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        pipes[i].reset();
        fds[i].fd = -1;
      }
    }
  }
}

}  // namespace

Result<std::string> run_and_capture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  SpawnSpec spec;
  spec.argv = argv;
  spec.search_path = true;
  spec.output = ChildOutput::kCapture;
  spec.process_group = kNewGroup;  // so that a timeout ends whatever it started too
  spec.death_signal = SIGKILL;
  const auto deadline = Clock::now() + timeout;
  RLRUN_ASSIGN_OR_RETURN(Child child, spawn(spec));
  Fd pipes[2];
  pipes[0].reset(child.stdout_fd);
  pipes[1].reset(child.stderr_fd);
  std::string text[2];
  int status = 0;
  std::string command;
  for (const std::string& a : argv) command = str(command, command.empty() ? "" : " ", a);
  if (!collect(child.pid, pipes, text, deadline, &status)) {
    ::kill(child.process_group == child.pid ? -child.pid : child.pid, SIGKILL);
    while (::waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {  // SIGKILLed: it ends now
    }
    return timeout_error(str("`", command, "` did not finish within ", timeout.count(), " ms; killed it"));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return text[0];
  const std::string how = WIFEXITED(status) ? str("exited with code ", WEXITSTATUS(status))
                                            : str("was killed by signal ", WTERMSIG(status));
  const std::string_view message = trim(text[1]);
  return unavailable(str("`", command, "` ", how, ": ", message.empty() ? "no message" : message));
}

}  // namespace rlrun::orchestrator
