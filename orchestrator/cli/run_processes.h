// cli/run_processes.h - `rlrun CONFIG`'s run once its folder is ready (cmd_run.cc): placement, the
// run's inputs, /metrics, the control plane, the worker processes and the Orchestrator's loop.
#pragma once

#include <atomic>
#include <optional>

#include "common/config/config.h"
#include "common/status.h"
#include "orchestrator/run/outcome.h"
#include "orchestrator/run/training/state.h"

namespace rlrun::orchestrator {

// Runs `config` in config.run_dir (absolute, with its effective config.yaml written); `resume`:
// the checkpoint it continues from. Fills `outcome` whatever happens, also when it returns an
// error; `interrupted` counts SIGINT/SIGTERM.
Status run_processes(const Config& config, const std::optional<ResumePoint>& resume,
                     const std::atomic<int>& interrupted, RunOutcome& outcome);

}  // namespace rlrun::orchestrator
