// launcher.h - starts and stops the worker processes of a run.
//
// `local` starts them on this machine; `slurm` (slurm_launcher.h) starts srun job steps inside an
// allocation. Both start processes with spawn() (spawn.h): stdin is /dev/null.
// Both give every process its own log file and tear the whole set down together. The
// orchestrator is the only caller, from its main thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::orchestrator {

struct ProcessSpec {
  std::string name;                         // "trainer-0", "rollout-1": unique within the run
  std::vector<std::string> argv;            // argv[0] is the executable path
  std::map<std::string, std::string> env;   // added to (or replacing in) the inherited environment
  std::string log_path;                     // stdout and stderr go here (appended)
  std::string node;                         // placement node (slurm); ignored by the local launcher
  std::vector<int> gpus;                    // devices to expose (CUDA_VISIBLE_DEVICES)
  int cpus = 1;                             // cores it uses (slurm: --cpus-per-task; its threads: place_worker)
};

struct ProcessExit {
  std::string name;
  int exit_code = 0;   // valid when signal == 0
  int signal = 0;      // the signal that ended it, or 0
  std::string describe() const;  // "exited with code 3" / "killed by signal 9 (SIGKILL)"
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Errors: the spec is wrong for this launcher, its log cannot be opened, or the program (the
  // worker; srun for Slurm) cannot be run; a worker that starts and then fails is an exit.
  virtual Status start(const ProcessSpec& spec) = 0;
  // Processes that ended since the last call (non-blocking).
  virtual std::vector<ProcessExit> poll_exits() = 0;
  // Sends SIGKILL to one process (fault injection, hung workers).
  virtual Status kill(const std::string& name) = 0;
  // SIGTERM to every live process, then SIGKILL to what is left after `grace`; waits for all.
  virtual void stop_all(std::chrono::milliseconds grace) = 0;
  virtual size_t live_count() const = 0;
};

// Every worker goes into one process group apart from the orchestrator's (a Ctrl-C at the
// terminal reaches the orchestrator alone, which then checkpoints and stops the workers), and
// gets PR_SET_PDEATHSIG so that it dies with the orchestrator, even after a SIGKILL.
std::unique_ptr<Launcher> make_local_launcher();

}  // namespace rlrun::orchestrator
