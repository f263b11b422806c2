// rollout_hooks.h - how a test binary makes `rlrun rollout` workers fail on purpose.
//
// The `rlrun` binary never calls this. The fault-tolerance tests build their own copy of rlrun
// (tests/orchestrator/run/fault_double_main.cc) that sets a factory before rlrun_main(): the
// orchestrator starts its workers from its own executable, so every rollout worker of such a run
// asks the factory for hooks (rollout::WorkerHooks) with its index and incarnation (0: started
// with the run; N: its Nth replacement).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "rollout/worker.h"

namespace rlrun::orchestrator {

using RolloutHooksFactory = std::function<std::unique_ptr<rollout::WorkerHooks>(int32_t index, int incarnation)>;
void set_rollout_hooks_factory(RolloutHooksFactory factory);

}  // namespace rlrun::orchestrator
