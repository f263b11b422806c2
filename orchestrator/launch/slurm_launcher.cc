#include "orchestrator/launch/slurm_launcher.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <thread>

#include "common/observe/log.h"
#include "orchestrator/launch/spawn.h"

namespace rlrun::orchestrator {

namespace {

// Runs in the step before the worker: $0 = planned 1-based fields of Slurm's CUDA_VISIBLE_DEVICES
// ("" = no GPU planned: leave it), $1 = planned indices (used when Slurm set none), then the
// worker's argv. Its first line in the worker's log says which step and node the worker got.
constexpr const char* kStepPrologue =
    "if [ -n \"$0\" ]; then if [ -n \"${CUDA_VISIBLE_DEVICES:-}\" ]; then "
    "CUDA_VISIBLE_DEVICES=$(printf %s \"$CUDA_VISIBLE_DEVICES\" | cut -d, -f\"$0\"); "
    "else CUDA_VISIBLE_DEVICES=$1; fi; export CUDA_VISIBLE_DEVICES; fi; "
    "echo \"rlrun: step $SLURM_JOB_ID.$SLURM_STEP_ID on node $SLURMD_NODENAME"
    " (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-})\"; shift; exec \"$@\"";

std::string join_ints(const std::vector<int>& v, int offset) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s = str(s, i ? "," : "", v[i] + offset);
  return s;
}

}  // namespace

std::string slurm_step_name(const std::string& process_name, int incarnation) {
  return incarnation <= 1 ? "rlrun-" + process_name : str("rlrun-", process_name, ".r", incarnation);
}

std::vector<std::string> srun_command(const std::string& job_id, const ProcessSpec& spec,
                                      const std::string& step_name) {
  std::vector<std::string> cmd = {"srun",
                                  "--jobid=" + job_id,
                                  "--nodes=1",
                                  "--ntasks=1",
                                  "--nodelist=" + spec.node,
                                  "--exact",
                                  "--overlap",
                                  str("--cpus-per-task=", std::max(1, spec.cpus)),
                                  "--kill-on-bad-exit=1",
                                  "--job-name=" + step_name};
  cmd.insert(cmd.end(), {"/bin/sh", "-c", kStepPrologue, join_ints(spec.gpus, 1), join_ints(spec.gpus, 0)});
  cmd.insert(cmd.end(), spec.argv.begin(), spec.argv.end());
  return cmd;
}

std::string find_step_id(const std::string& squeue_output, const std::string& step_name) {
  std::string best;
  long best_step = -1;
  size_t start = 0;
  while (start < squeue_output.size()) {
    size_t end = squeue_output.find('\n', start);
    if (end == std::string::npos) end = squeue_output.size();
    const std::string line = squeue_output.substr(start, end - start);
    start = end + 1;
    const size_t bar = line.find('|');
    if (bar == std::string::npos || line.substr(bar + 1) != step_name) continue;
    const std::string id = line.substr(0, bar);
    const size_t dot = id.find('.');
    if (dot == std::string::npos) continue;
    const long step = std::strtol(id.c_str() + dot + 1, nullptr, 10);
    if (step > best_step) best_step = step, best = id;
  }
  return best;
}

ProcessExit srun_exit(const std::string& name, int status) {
  ProcessExit e;
  e.name = name;
  if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);  // srun itself was killed
  } else if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code > 128 && code < 128 + NSIG) {
      e.signal = code - 128;  // srun(1): 128 + the signal that ended the task
    } else {
      e.exit_code = code;
    }
  }
  return e;
}

namespace {

class SlurmLauncher : public Launcher {
 public:
  explicit SlurmLauncher(SlurmAllocation allocation) : allocation_(std::move(allocation)) {}
  ~SlurmLauncher() override { stop_all(std::chrono::milliseconds(2000)); }

  Status start(const ProcessSpec& spec) override {
    RLRUN_RETURN_IF_ERROR(check_spec(spec));
    const std::string step_name = slurm_step_name(spec.name, starts_[spec.name] + 1);
    SpawnSpec srun;
    srun.argv = srun_command(allocation_.job_id, spec, step_name);
    srun.search_path = true;
    srun.env = spec.env;  // srun exports its environment to the task (--export=ALL)
    srun.output = ChildOutput::kAppendToLog;
    srun.log_path = spec.log_path;
    srun.process_group = kNewGroup;  // a terminal's Ctrl-C reaches the orchestrator alone
    srun.death_signal = SIGTERM;     // srun cancels its step when it gets SIGTERM
    Result<Child> child = spawn(srun);
    if (!child.ok()) return child.status().with_context(str("process ", spec.name, ": starting its srun step"));
    ++starts_[spec.name];
    live_.push_back(Step{spec.name, step_name, child->pid, ""});
    log::debug(str("started ", spec.name, " on ", spec.node, " (srun pid ", child->pid, ")"));
    return Status();
  }

  std::vector<ProcessExit> poll_exits() override {
    std::vector<ProcessExit> exits;
    for (auto it = live_.begin(); it != live_.end();) {
      int status = 0;
      if (::waitpid(it->srun_pid, &status, WNOHANG) == it->srun_pid) {
        exits.push_back(srun_exit(it->name, status));
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    return exits;
  }

  Status kill(const std::string& name) override {
    auto it = std::find_if(live_.begin(), live_.end(), [&](const Step& s) { return s.name == name; });
    if (it == live_.end()) return not_found(str("no live process named ", name));
    // The step may still be in creation: look for it for up to ~2 s.
    for (int attempt = 0; attempt < 20 && it->step_id.empty(); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      lookup_step_ids();
    }
    if (it->step_id.empty()) {
      // No step listed yet (srun still waiting to create it): SIGTERM makes srun give up, or
      // cancel the step should it appear meanwhile; a SIGKILLed srun could orphan a fresh task.
      ::kill(it->srun_pid, SIGTERM);
      return Status();
    }
    if (Status st = scancel({"--signal=KILL", it->step_id}); !st.ok()) {
      // Slurm 22.05's scancel reports errors for step signals it did deliver; SIGTERM to srun
      // cancels the step for certain (the task is then SIGKILLed after KillWait).
      log::debug(st.to_string());
      ::kill(it->srun_pid, SIGTERM);
    }
    return Status();
  }

  void stop_all(std::chrono::milliseconds grace) override {
    if (live_.empty()) return;
    lookup_step_ids();
    std::vector<std::string> ids;
    for (const Step& s : live_) {
      if (s.step_id.empty()) {
        ::kill(s.srun_pid, SIGTERM);
      } else {
        ids.push_back(s.step_id);
      }
    }
    if (!ids.empty()) {
      ids.insert(ids.begin(), "--signal=TERM");
      // (22.05's scancel may report an error for a signal it delivered; the grace period below
      // ends the steps either way)
      if (Status st = scancel(ids); !st.ok()) log::debug(st.to_string());
    }
    if (!wait_all(grace)) {
      // SIGTERM to srun cancels its step; Slurm SIGKILLs the task after KillWait.
      for (const Step& s : live_) {
        log::warn(str(s.name, " did not stop within ", grace.count(), " ms: cancelling its step"));
        ::kill(s.srun_pid, SIGTERM);
      }
      if (!wait_all(std::chrono::milliseconds(15000))) {
        for (const Step& s : live_) ::kill(s.srun_pid, SIGKILL);
      }
    }
    for (const Step& s : live_) ::waitpid(s.srun_pid, nullptr, 0);
    live_.clear();
  }

  size_t live_count() const override { return live_.size(); }

 private:
  struct Step {
    std::string name;
    std::string step_name;  // --job-name of its step
    pid_t srun_pid;
    std::string step_id;  // "JOB.STEP" once seen in squeue
  };

  Status check_spec(const ProcessSpec& spec) const {
    if (spec.argv.empty()) return invalid_argument(str("process ", spec.name, ": empty command"));
    for (const Step& s : live_) {
      if (s.name == spec.name) return invalid_argument(str("process ", spec.name, " is already running"));
    }
    std::string names;
    for (const NodeResources& node : allocation_.nodes) {
      if (node.name != spec.node) {
        names = str(names, names.empty() ? "" : ", ", node.name);
        continue;
      }
      for (int g : spec.gpus) {
        if (g < 0 || g >= node.gpus) {
          return invalid_argument(str("process ", spec.name, ": GPU ", g, " does not exist on node ", node.name,
                                      ", where job ", allocation_.job_id, " holds ", node.gpus, " GPU(s)"));
        }
      }
      if (spec.cpus > node.cpus) {
        return invalid_argument(str("process ", spec.name, ": wants ", spec.cpus, " CPUs, but job ",
                                    allocation_.job_id, " holds ", node.cpus, " on node ", node.name));
      }
      return Status();
    }
    return invalid_argument(str("process ", spec.name, ": node \"", spec.node, "\" is not in job ",
                                allocation_.job_id, " (its nodes: ", names, ")"));
  }

  // Fills step_id of live steps from one squeue call.
  void lookup_step_ids() {
    auto out = run_and_capture({"squeue", "--steps", "--noheader", "--jobs=" + allocation_.job_id, "--format=%i|%j"});
    if (!out.ok()) {
      log::warn(out.status().to_string());
      return;
    }
    for (Step& s : live_) {
      if (s.step_id.empty()) s.step_id = find_step_id(*out, s.step_name);
    }
  }

  static Status scancel(std::vector<std::string> args) {
    args.insert(args.begin(), {"scancel", "--quiet"});
    auto out = run_and_capture(args);
    return out.ok() ? Status() : out.status();
  }

  // Reaps exits until none is live or `limit` passes; true when all ended.
  bool wait_all(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!live_.empty() && std::chrono::steady_clock::now() < deadline) {
      poll_exits();
      if (!live_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return live_.empty();
  }

  SlurmAllocation allocation_;
  std::vector<Step> live_;
  std::map<std::string, int> starts_;  // process name -> how many times it was started
};

}  // namespace

std::unique_ptr<Launcher> make_slurm_launcher(const SlurmAllocation& allocation) {
  return std::make_unique<SlurmLauncher>(allocation);
}

}  // namespace rlrun::orchestrator
