// cli_test_util.h - run the real `rlrun` binary from a test and capture what it prints.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/observe/log.h"
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

// The real SmolLM2-135M-Instruct HF folder that scripts/setup.sh --test converts (RLRUN_MODELS_DIR
// or build/models); tests that need it fail when it is missing unless RLRUN_SKIP_MODEL_TESTS=1.
inline std::filesystem::path smollm2_dir() {
  const char* env = std::getenv("RLRUN_MODELS_DIR");
  const std::filesystem::path models =
      env != nullptr && *env ? std::filesystem::path(env) : std::filesystem::path(RLRUN_SOURCE_DIR) / "build/models";
  return models / "smollm2-135m-instruct";
}

// Token ids as a comma-separated flag value: --prompt-ids 1,2,3.
inline std::string ids_arg(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

inline bool skip_model_tests() {
  const char* skip = std::getenv("RLRUN_SKIP_MODEL_TESTS");
  return skip != nullptr && std::string(skip) == "1";
}

// Starts `argv` in `cwd` with stdout and stderr to `log`; returns its pid (or -1).
inline pid_t spawn_in(const std::string& cwd, const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::chdir(cwd.c_str()) != 0) ::_exit(127);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

}  // namespace rlrun::testing
