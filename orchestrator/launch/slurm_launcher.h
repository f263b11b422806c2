// slurm_launcher.h - the `slurm` launcher: every worker is one `srun` job step of the allocation
// the orchestrator runs in (one task on the node its placement chose), so Slurm, not rlrun, owns
// the processes on the other nodes: it starts them, forwards their output, and kills them when
// the step or the whole job ends.
//
// Placement: --nodelist=NODE --nodes=1 --ntasks=1 pins the step to the planned node. Steps run
// side by side (--overlap: they may share the job's CPUs, memory and GPUs on a node; rlrun's plan,
// not Slurm, decides who uses which device), each bound to its --cpus-per-task (--exact).
// Without --overlap a step with no GPU request takes all the job's GPUs on its node and the next
// step waits; with it, steps start together even under CR_Core_Memory with --mem set (Slurm 22.05).
// GPUs: a step sees all of the job's GPUs on its node, in Slurm's CUDA_VISIBLE_DEVICES; planned
// device i is the i-th entry of that list (Slurm's indices may be remapped by cgroups or name GPUs
// other jobs do not hold), so a tiny /bin/sh prologue in the step narrows CUDA_VISIBLE_DEVICES to
// the planned entries before exec. A job without GPU GRES gets the planned indices as they are.
// The prologue also writes "rlrun: step JOB.STEP on node NODE (CUDA_VISIBLE_DEVICES=...)" as the
// first line of the worker's log: where Slurm really put it.
// Output: srun forwards the task's stdout/stderr to its own, which goes to spec.log_path on the
// orchestrator's node (no shared file system needed); srun's own errors land there too.
// Exits: srun returns the task's exit code, or 128+N when a signal N ended it (srun(1)); poll_exits
// reports the latter as signal N. A worker exiting with a code above 128 by itself therefore reads
// as a signal.
// Teardown: kill() sends SIGKILL to the step's task (scancel --signal=KILL JOB.STEP; it looks the
// step up with squeue and may block up to ~2 s for a step still being created); stop_all()
// sends SIGTERM to every step, then after the grace period terminates srun (which cancels its
// step: SIGKILL after Slurm's KillWait). Every srun gets PR_SET_PDEATHSIG=SIGTERM, so the steps
// end when the orchestrator dies, and Slurm ends every step with the job when the batch script or
// salloc command (the orchestrator) exits. --kill-on-bad-exit=1 ends a step whose task fails.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "orchestrator/launch/launcher.h"
#include "orchestrator/launch/slurm_allocation.h"

namespace rlrun::orchestrator {

// Starts workers as srun steps of `allocation`. ProcessSpec::node must be one of its nodes and
// ProcessSpec::gpus indices below that node's GPU count; start() says otherwise.
std::unique_ptr<Launcher> make_slurm_launcher(const SlurmAllocation& allocation);

// The full command line that starts `spec` as step `step_name` of job `job_id` (pure, tested):
//   srun --jobid=J --nodes=1 --ntasks=1 --nodelist=NODE --exact --overlap --cpus-per-task=C
//        --kill-on-bad-exit=1 --job-name=STEP_NAME /bin/sh -c PROLOGUE FIELDS INDICES ARGV...
std::vector<std::string> srun_command(const std::string& job_id, const ProcessSpec& spec,
                                      const std::string& step_name);

// The step name of the `incarnation`-th start (1, 2, ...) of process `process_name`: "rlrun-NAME",
// then "rlrun-NAME.r2", ... what squeue shows and kill() looks for. A restarted worker's step
// never shares its name with the record of an earlier one that the controller still lists.
std::string slurm_step_name(const std::string& process_name, int incarnation);

// "1234.5" for the step named `step_name` in `squeue --steps` output lines "ID|NAME", or "" when
// absent (not created yet, or gone); the newest when several share the name.
std::string find_step_id(const std::string& squeue_output, const std::string& step_name);

// The ProcessExit for an srun that ended with wait status `status`.
ProcessExit srun_exit(const std::string& name, int status);

}  // namespace rlrun::orchestrator
