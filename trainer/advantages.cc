#include "trainer/advantages.h"

#include <algorithm>
#include <cmath>

#include "common/observe/log.h"

namespace rlrun::trainer {

Result<Algorithm> parse_algorithm(std::string_view name) {
  if (name == "grpo") return Algorithm::kGrpo;
  if (name == "dr_grpo") return Algorithm::kDrGrpo;
  if (name == "rloo") return Algorithm::kRloo;
  if (name == "gspo") return Algorithm::kGspo;
  return invalid_argument(
      str("unknown algorithm `", name, "`: expected one of grpo, dr_grpo, rloo, gspo"));
}

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kGrpo: return "grpo";
    case Algorithm::kDrGrpo: return "dr_grpo";
    case Algorithm::kRloo: return "rloo";
    case Algorithm::kGspo: return "gspo";
  }
  return "unknown";
}

Status compute_group_advantages(Algorithm algorithm, std::span<const float> rewards,
                                std::span<float> advantages, double std_eps) {
  const size_t n = rewards.size();
  if (n == 0) return invalid_argument("advantages: empty group (group_size must be >= 1)");
  if (advantages.size() != n) {
    return invalid_argument(
        str("advantages: output has ", advantages.size(), " slots for ", n, " rewards"));
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(rewards[i])) {
      return invalid_argument(str("advantages: reward ", i, " of the group is ", rewards[i],
                                  "; the environment must return finite rewards"));
    }
    sum += rewards[i];
  }
  const double mean = sum / static_cast<double>(n);

  switch (algorithm) {
    case Algorithm::kGrpo:
    case Algorithm::kGspo: {
      double sq = 0.0;
      for (float r : rewards) sq += (r - mean) * (r - mean);
      const double sample_std = n > 1 ? std::sqrt(sq / static_cast<double>(n - 1)) : 0.0;
      for (size_t i = 0; i < n; ++i) {
        advantages[i] = static_cast<float>((rewards[i] - mean) / (sample_std + std_eps));
      }
      return Status::ok_status();
    }
    case Algorithm::kDrGrpo:
      for (size_t i = 0; i < n; ++i) advantages[i] = static_cast<float>(rewards[i] - mean);
      return Status::ok_status();
    case Algorithm::kRloo: {
      if (n < 2)
        return invalid_argument("advantages: rloo needs group_size >= 2 (leave-one-out baseline)");
      for (size_t i = 0; i < n; ++i) {
        const double others_mean = (sum - rewards[i]) / static_cast<double>(n - 1);
        advantages[i] = static_cast<float>(rewards[i] - others_mean);
      }
      return Status::ok_status();
    }
  }
  return invalid_argument("advantages: unknown algorithm");
}

Status compute_advantages(Algorithm algorithm, std::span<const float> rewards, int group_size,
                          std::span<float> advantages, double std_eps) {
  if (group_size < 1) return invalid_argument(str("advantages: group_size ", group_size, " < 1"));
  const size_t g = static_cast<size_t>(group_size);
  if (rewards.empty() || rewards.size() % g != 0) {
    return invalid_argument(str("advantages: ", rewards.size(),
                                " rewards are not a positive multiple of group_size ", group_size));
  }
  if (advantages.size() != rewards.size()) {
    return invalid_argument(str("advantages: output has ", advantages.size(), " slots for ",
                                rewards.size(), " rewards"));
  }
  for (size_t begin = 0; begin < rewards.size(); begin += g) {
    Status s = compute_group_advantages(algorithm, rewards.subspan(begin, g),
                                        advantages.subspan(begin, g), std_eps);
    if (!s.ok()) return s.with_context(str("group ", begin / g));
  }
  return Status::ok_status();
}

bool group_has_zero_spread(std::span<const float> rewards, double tolerance) {
  if (rewards.empty()) return true;
  const auto [lo, hi] = std::minmax_element(rewards.begin(), rewards.end());
  for (float r : rewards) {
    if (!std::isfinite(r)) return false;
  }
  return static_cast<double>(*hi) - static_cast<double>(*lo) <= tolerance;
}

}  // namespace rlrun::trainer
