// advantages.h - per-sample advantages from the scalar rewards of one group (group_size samples of
// the same prompt). This is the one place advantages are computed: the orchestrator calls it when
// a group finishes scoring, and the trainer's loss consumes the result (policy_loss.h).
//
// With r the group's rewards, n = group_size, mean = sum(r) / n:
//   grpo, gspo  A_i = (r_i - mean) / (std + eps), std the SAMPLE standard deviation
//               sqrt(sum (r_j - mean)^2 / (n - 1)), eps = 1e-6. This is the convention of the
//               common GRPO implementations: TRL's GRPOTrainer and verl both use torch.std, which
//               is Bessel-corrected (eps: verl 1e-6, TRL 1e-4); DeepSeekMath [Shao et al. 2024,
//               sec. 4.1.2] writes only "std". GSPO [Zheng et al. 2025] uses the same advantage.
//   dr_grpo     A_i = r_i - mean, no std division [Liu et al. 2025, "Understanding R1-Zero-Like
//               Training"]: the std term up-weights prompts that are too easy or too hard.
//   rloo        A_i = r_i - (sum_{j != i} r_j) / (n - 1) = n / (n - 1) * (r_i - mean)
//               [Kool et al. 2019, "Buy 4 REINFORCE samples"; Ahmadian et al. 2024, "Back to
//               Basics: Revisiting REINFORCE Style Optimization ... in LLMs"].
// A group of one sample has advantage 0 under grpo, gspo and dr_grpo; rloo needs n >= 2.
#pragma once

#include <span>
#include <string_view>

#include "common/status.h"

namespace rlrun::trainer {

// The RL algorithm: it picks both the advantage estimator (here) and the loss (policy_loss.h).
enum class Algorithm { kGrpo, kDrGrpo, kRloo, kGspo };

// "grpo" | "dr_grpo" | "rloo" | "gspo"; an unknown name is an invalid_argument naming the choices.
Result<Algorithm> parse_algorithm(std::string_view name);
const char* algorithm_name(Algorithm algorithm);

inline constexpr double kAdvantageStdEps = 1e-6;

// Advantages of one group: advantages[i] belongs to rewards[i]. Computed in double, written as
// float. Errors (invalid_argument): empty group, size mismatch, a non-finite reward (rewards come
// from user environments), rloo with fewer than 2 samples.
Status compute_group_advantages(Algorithm algorithm, std::span<const float> rewards,
                                std::span<float> advantages, double std_eps = kAdvantageStdEps);

// Many groups back to back: group g is rewards[g * group_size, (g + 1) * group_size).
// rewards.size() must be a positive multiple of group_size.
Status compute_advantages(Algorithm algorithm, std::span<const float> rewards, int group_size,
                          std::span<float> advantages, double std_eps = kAdvantageStdEps);

// True when the group's rewards have no spread (max - min <= tolerance), i.e. every advantage is
// zero and the group carries no learning signal: `discard_group_zero_advantage` drops such groups.
// The default tolerance 0 means "all rewards exactly equal" (the usual std == 0 filter). An empty
// group has no spread; a group with a non-finite reward does not count as zero-spread (it is an
// error for compute_group_advantages instead).
bool group_has_zero_spread(std::span<const float> rewards, double tolerance = 0.0);

}  // namespace rlrun::trainer
