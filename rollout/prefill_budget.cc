// prefill_budget.cc - a prefill step's token budget (prefill_budget.h).
#include "rollout/prefill_budget.h"

#include <algorithm>
#include <cmath>

namespace rlrun::rollout {

double prefill_flops_per_token(const engine::ModelConfig& config) {
  const double embeddings = static_cast<double>(config.vocab_size) * static_cast<double>(config.hidden_size) *
                            (config.tie_embeddings ? 1.0 : 2.0);
  return 2.0 * std::max(1.0, static_cast<double>(config.num_parameters()) - embeddings);
}

int64_t plan_prefill_tokens(const engine::ModelConfig& config, double gflops_per_thread, int threads, double seconds) {
  constexpr double kPrefillEfficiency = 0.5;
  const double flops = std::max(0.0, gflops_per_thread) * 1e9 * std::max(1, threads) * kPrefillEfficiency * seconds;
  const double tokens = std::floor(flops / prefill_flops_per_token(config));
  return static_cast<int64_t>(
      std::clamp(tokens, static_cast<double>(kMinPlannedPrefillTokens), static_cast<double>(kMaxPlannedPrefillTokens)));
}

}  // namespace rlrun::rollout
