// spawn.h - the one way rlrun starts a child process. A SpawnSpec states the policy (program,
// environment, where its output goes, process group, death signal); spawn() applies it between
// fork and exec, and run_and_capture() runs a short command to its end for its output.
//
// Every child gets /dev/null as stdin, SIGPIPE back at its default action (rlrun ignores it; a
// child should not inherit that) and no blocked signal. spawn() returns once the child has
// exec'd: a program that cannot be run (missing, not executable) is an error naming it, never a
// child that exits 127 later. Between fork and exec the child calls only async-signal-safe
// functions: every string, array and file descriptor is prepared before fork.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::orchestrator {

// Where the child's stdout and stderr go.
enum class ChildOutput {
  kInherit,      // the parent's
  kAppendToLog,  // both appended to SpawnSpec::log_path (created 0644 when absent)
  kCapture,      // one pipe each; the read ends come back in Child
};

// SpawnSpec::process_group: stay in the parent's group, or lead a new one. Any other value N
// joins group N, or leads a new one when N has no member left.
inline constexpr pid_t kParentGroup = -1;
inline constexpr pid_t kNewGroup = 0;

struct SpawnSpec {
  std::vector<std::string> argv;           // argv[0]: a path, or a name looked up in PATH if search_path
  bool search_path = false;                // resolve argv[0] through this process's PATH
  bool inherit_environment = true;         // false: the child's environment is exactly `env`
  std::map<std::string, std::string> env;  // added to (or replacing in) the inherited environment
  ChildOutput output = ChildOutput::kInherit;
  std::string log_path;                    // for kAppendToLog
  pid_t process_group = kParentGroup;
  // Sent to the child when the thread that spawned it ends (PR_SET_PDEATHSIG), even by SIGKILL;
  // 0: none. A child whose parent is already gone by then exits 127 before exec.
  int death_signal = 0;
};

struct Child {
  pid_t pid = -1;            // the caller reaps it (waitpid)
  pid_t process_group = -1;  // the group it is in
  int stdout_fd = -1;        // kCapture: read ends (close-on-exec), owned and closed by the caller
  int stderr_fd = -1;
};

// Starts spec.argv. Errors name the program and say why (not found in PATH, errno's text).
Result<Child> spawn(const SpawnSpec& spec);

// Runs argv (looked up in PATH, in a process group of its own, dying with the caller) to its end
// and returns its standard output. Reads stdout and stderr together, so neither pipe can fill up
// and stall it. Errors: it cannot be started, it exits non-zero or is killed (with its stderr),
// or it has not ended within `timeout` (its group is then killed and reaped).
Result<std::string> run_and_capture(const std::vector<std::string>& argv,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace rlrun::orchestrator
