// cli_test_util.h - run the real `rlrun` binary from a test and capture what it prints.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/log.h"
#include "tests/common/config_test_util.h"

namespace rlrun::testing {

struct CliRun {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string out, err;
};

inline std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `command` through the shell (arguments already quoted); stdout and stderr go to files in dir.
inline CliRun run_shell(const TempDir& dir, const std::string& command) {
  const std::string out = dir.path() + "/stdout", err = dir.path() + "/stderr";
  const int status = std::system(str(command, " >'", out, "' 2>'", err, "'").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_all(out), read_all(err)};
}

// Runs `rlrun ARGS` (ARGS already shell-quoted).
inline CliRun run_rlrun(const TempDir& dir, const std::string& args) {
  return run_shell(dir, str("'", RLRUN_BINARY, "' ", args));
}

}  // namespace rlrun::testing
