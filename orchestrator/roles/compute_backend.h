// compute_backend.h - the backend a worker process computes on, as the config says: `backend`,
// its threads, and `compute_dtype` / `base_weights_dtype` (bf16 products where the CPU multiplies
// bf16 natively), with the ModelOptions a worker's model takes from them.
#pragma once

#include <memory>
#include <string>

#include "common/config/config.h"
#include "engine/backend.h"
#include "engine/model/weights.h"

namespace rlrun::orchestrator {

// `threads`: the CPU backend's compute threads (0: every core). compute_dtype or base_weights_dtype
// bf16 on a CPU without native bf16 products is an error naming the key, the CPU's features and
// what to set instead.
Result<std::unique_ptr<engine::Backend>> backend_from_config(const Config& config, int threads);

// The same refusal without building a backend, for the orchestrator's checks before it starts
// workers on this host.
Status check_compute_dtype(const Config& config);
// The refusal itself: `cpu` says what the host has (its model and flags, the GEMM library and its
// kernels), native whether it multiplies bf16 natively. Pure, for tests.
Status check_bf16_products(const Config& config, bool native, const std::string& cpu);

// Whether the weights that never train are kept as bf16 matrices only (kBf16Frozen): backend cpu
// with base_weights_dtype: bf16, or with compute_dtype: bf16, whose products read every weight
// matrix rounded to bf16 anyway (the same values, half the bytes, no rounding per product). A
// trainer's base never trains under LoRA adapters (lora_rank > 0), a rollout worker's ever (its
// weights change by weight sync only, which rounds what it receives).
bool bf16_frozen_weights(const Config& config);
engine::WeightStorage frozen_weight_storage(const Config& config);
// How a trainer keeps the weights it trains (and its KL reference copy): kBf16Cache with
// compute_dtype: bf16 on a CPU (an f32 master, and bf16 matrices refreshed once per optimizer step
// for the products), else kF32.
engine::WeightStorage trained_weight_storage(const Config& config);

}  // namespace rlrun::orchestrator
