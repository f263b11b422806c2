// compute_backend.h - the backend a worker process computes on, as the config says: `backend`,
// its threads, and `compute_dtype` / `base_weights_dtype` (bf16 products where the CPU multiplies
// bf16 natively; compute_dtype auto: wherever it does), with the ModelOptions a worker's model
// takes from them.
#pragma once

#include <memory>
#include <string>

#include "common/config/config.h"
#include "engine/backend.h"
#include "engine/model/weights.h"

namespace rlrun::orchestrator {

// What compute_dtype comes to: bf16 or fp32 as set; auto: bf16 when `native` (the CPU multiplies
// bf16 natively: AVX512_BF16 or AMX), else fp32. On the Zen 4 host (AVX512_BF16) bf16 products
// made SmolLM2-135M's RL step 1.2x faster and the quickstart (a 128-wide model) 1.19x, both
// learning alike (docs/performance.md, "bf16 products"). Pure, for tests.
ComputeDtype pick_compute_dtype(ComputeDtypeChoice asked, bool native);
// Whether this config's products run in bf16 on a CPU: backend cpu, and pick_compute_dtype bf16 on
// this CPU (backend cuda computes in bf16 whatever compute_dtype says).
bool cpu_bf16_products(const Config& config);
// One line for the logs: what compute_dtype came to on this host, and why when it was auto.
std::string describe_compute_dtype(const Config& config);

// `threads`: the CPU backend's compute threads (0: every core). compute_dtype or base_weights_dtype
// bf16 on a CPU without native bf16 products is an error naming the key, the CPU's features and
// what to set instead (compute_dtype: auto is never refused: it comes to fp32 there).
Result<std::unique_ptr<engine::Backend>> backend_from_config(const Config& config, int threads);

// The same refusal without building a backend, for the orchestrator's checks before it starts
// workers on this host.
Status check_compute_dtype(const Config& config);
// The refusal itself: `cpu` says what the host has (its model and flags, the GEMM library and its
// kernels), native whether it multiplies bf16 natively. Pure, for tests.
Status check_bf16_products(const Config& config, bool native, const std::string& cpu);

// Whether the weights that never train are kept as bf16 matrices only (kBf16Frozen): backend cpu
// with base_weights_dtype: bf16, or with cpu_bf16_products, whose products read every weight
// matrix rounded to bf16 anyway (the same values, half the bytes, no rounding per product). A
// trainer's base never trains under LoRA adapters (lora_rank > 0), a rollout worker's ever (its
// weights change by weight sync only, which rounds what it receives).
bool bf16_frozen_weights(const Config& config);
engine::WeightStorage frozen_weight_storage(const Config& config);
// How a trainer keeps the weights it trains (and its KL reference copy): kBf16Cache with
// cpu_bf16_products (an f32 master, and bf16 matrices refreshed once per optimizer step
// for the products), else kF32.
engine::WeightStorage trained_weight_storage(const Config& config);

}  // namespace rlrun::orchestrator
