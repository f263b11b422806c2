// prefill_budget.h - how many prompt tokens one engine step may prefill.
//
// An engine step is the rollout worker's unit of work: a weight sync, a cancel and the KL
// reference's passes wait for its end, and a prefill of many prompts is the longest step there is
// (SmolLM2-135M prefilling 32 prompts of ~45 tokens took over 10 s on a host whose BLAS had
// fallen back to SSE3 kernels). With max_prefill_tokens 0 (the default) the worker plans the
// budget at start from its own measured matrix-product speed, so that one step's prefill takes
// about kPrefillStepSeconds on the host it runs on, fast or slow; a step always admits at least
// one sequence, whatever its length.
#pragma once

#include <cstdint>

#include "engine/model/config.h"

namespace rlrun::rollout {

// The planned length of a prefill step: a quarter of the default heartbeat_timeout_seconds, and
// short beside a trainer step, so a weight sync waits for it briefly.
inline constexpr double kPrefillStepSeconds = 2.5;
// Bounds of a planned budget: below, matrix products of few rows waste the cores; above, nothing
// is gained (the products are at full speed long before).
inline constexpr int64_t kMinPlannedPrefillTokens = 128, kMaxPlannedPrefillTokens = 8192;

// FLOPs of one prompt token's forward pass (two per weight it multiplies; the embedding is a
// lookup, and the head scores only each sequence's last token).
double prefill_flops_per_token(const engine::ModelConfig& config);

// Tokens whose prefill takes about `seconds` on `threads` threads that each multiply at
// `gflops_per_thread` (measured, engine/cpu/cpu_gemm.h); prefill runs at about half the speed of
// a large sgemm (attention, norms, smaller products), which the plan assumes.
int64_t plan_prefill_tokens(const engine::ModelConfig& config, double gflops_per_thread, int threads,
                            double seconds = kPrefillStepSeconds);

}  // namespace rlrun::rollout
