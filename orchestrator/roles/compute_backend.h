// compute_backend.h - the backend a worker process computes on, as the config says: `backend`,
// its threads, and `compute_dtype` (bf16 products where the CPU multiplies bf16 natively).
#pragma once

#include <memory>

#include "common/config/config.h"
#include "engine/backend.h"

namespace rlrun::orchestrator {

// `threads`: the CPU backend's compute threads (0: every core). compute_dtype bf16 on a CPU without
// native bf16 products is an error naming the key, the CPU's features and what to set instead.
Result<std::unique_ptr<engine::Backend>> backend_from_config(const Config& config, int threads);

// The same refusal without building a backend, for the orchestrator's checks before it starts
// workers on this host.
Status check_compute_dtype(const Config& config);

}  // namespace rlrun::orchestrator
