// The configuration half of policy_loss.h: names, validation, aggregation defaults, stats merge.
#include <algorithm>
#include <cmath>

#include "common/observe/log.h"
#include "trainer/policy_loss.h"

namespace rlrun::trainer {

Result<LossAggregation> parse_loss_aggregation(std::string_view name) {
  if (name == "auto") return LossAggregation::kAlgorithmDefault;
  if (name == "seq_mean_token_mean") return LossAggregation::kSeqMeanTokenMean;
  if (name == "token_mean") return LossAggregation::kTokenMean;
  if (name == "seq_mean_token_sum_norm") return LossAggregation::kSeqMeanTokenSumNorm;
  return invalid_argument(str("unknown loss aggregation `", name,
                              "`: expected auto, seq_mean_token_mean, token_mean or "
                              "seq_mean_token_sum_norm"));
}

Result<TisMode> parse_tis_mode(std::string_view name) {
  if (name == "truncate") return TisMode::kTruncate;
  if (name == "icepop") return TisMode::kIcepop;
  return invalid_argument(str("unknown tis_mode `", name, "`: expected truncate or icepop"));
}

Result<KlEstimator> parse_kl_estimator(std::string_view name) {
  if (name == "k2") return KlEstimator::kK2;
  if (name == "k3") return KlEstimator::kK3;
  return invalid_argument(str("unknown kl_estimator `", name, "`: expected k2 or k3"));
}

Result<ClipReference> parse_clip_reference(std::string_view name) {
  if (name == "rollout") return ClipReference::kRollout;
  if (name == "batch") return ClipReference::kBatch;
  return invalid_argument(
      str("unknown ppo_clip_ref_logprobs `", name, "`: expected rollout or batch"));
}

LossAggregation resolved_aggregation(const PolicyLossConfig& config) {
  if (config.aggregation != LossAggregation::kAlgorithmDefault) return config.aggregation;
  return config.algorithm == Algorithm::kDrGrpo ? LossAggregation::kSeqMeanTokenSumNorm
                                                : LossAggregation::kSeqMeanTokenMean;
}

Status validate_policy_loss_config(const PolicyLossConfig& c) {
  auto bad = [](const char* key, double value, const char* want) {
    return invalid_argument(str(key, " = ", value, " is out of range: ", want));
  };
  if (!(c.clip_low >= 0.0 && c.clip_low < 1.0))
    return bad("clip_low", c.clip_low, "need 0 <= clip_low < 1");
  if (!(c.clip_high >= 0.0 && std::isfinite(c.clip_high))) {
    return bad("clip_high", c.clip_high, "need a finite clip_high >= 0");
  }
  if (!(c.clip_ratio_c == 0.0 || (c.clip_ratio_c > 1.0 && std::isfinite(c.clip_ratio_c)))) {
    return bad("clip_ratio_c", c.clip_ratio_c, "need 0 (dual clip off) or a finite value > 1");
  }
  if (c.use_tis) {
    if (c.ppo_clip_ref == ClipReference::kRollout) {
      return invalid_argument(
          "use_tis needs ppo_clip_ref_logprobs: batch (with rollout the PPO ratio already "
          "corrects the whole trainer/rollout mismatch and every TIS weight would be 1)");
    }
    const double min_cap = c.tis_mode == TisMode::kIcepop ? 1.0 : 0.0;
    if (!(c.tis_cap > min_cap && std::isfinite(c.tis_cap))) {
      return bad("tis_cap", c.tis_cap,
                 c.tis_mode == TisMode::kIcepop ? "icepop needs a finite tis_cap > 1"
                                                : "need a finite tis_cap > 0");
    }
  }
  if (!(c.kl_coef >= 0.0 && std::isfinite(c.kl_coef)))
    return bad("kl_coef", c.kl_coef, "need >= 0");
  if (!(c.entropy_coef >= 0.0 && std::isfinite(c.entropy_coef))) {
    return bad("entropy_coef", c.entropy_coef, "need >= 0");
  }
  if (resolved_aggregation(c) == LossAggregation::kSeqMeanTokenSumNorm && c.max_tokens <= 0) {
    return bad("max_tokens", static_cast<double>(c.max_tokens),
               "the seq_mean_token_sum_norm aggregation (dr_grpo) divides by max_tokens, need > 0");
  }
  return Status::ok_status();
}

void PolicyLossStats::merge(const PolicyLossStats& o) {
  tokens += o.tokens;
  sequences += o.sequences;
  units += o.units;
  clipped_low += o.clipped_low;
  clipped_high += o.clipped_high;
  dual_clipped += o.dual_clipped;
  tis_truncated += o.tis_truncated;
  ratio_sum += o.ratio_sum;
  ratio_min = std::min(ratio_min, o.ratio_min);
  ratio_max = std::max(ratio_max, o.ratio_max);
  tis_weight_sum += o.tis_weight_sum;
  tis_weight_min = std::min(tis_weight_min, o.tis_weight_min);
  tis_weight_max = std::max(tis_weight_max, o.tis_weight_max);
  approx_kl_sum += o.approx_kl_sum;
  ref_kl_sum += o.ref_kl_sum;
  entropy_sum += o.entropy_sum;
}

}  // namespace rlrun::trainer
