// policy_loss.h - the clipped policy-gradient loss of grpo / dr_grpo / rloo / gspo, with truncated
// importance sampling (TIS / icepop), a KL penalty and an entropy bonus, on packed token rows.
// Pure host math on spans (double accumulation): the model gives per-token log-probs, this gives
// back d(loss)/d(logprob) and d(loss)/d(entropy). A device port mirrors it term by term.
//
// Per masked token t of sequence s (mask from loss_mask; unmasked tokens contribute nothing):
//   log ratio     lr_t = logp_t - old_t           old = the PPO clip reference: the rollout
//                                                 log-probs, or (ppo_clip_ref_logprobs: batch)
//                                                 the ones the trainer recomputed before its first
//                                                 update; clamped to [-20, 20], no gradient past.
//   "unit"        a token, or for gspo the whole sequence with lr_s = mean_t lr_t (the log of the
//                 geometric mean of token ratios [GSPO, Zheng et al. 2025]); r = exp(lr).
//   PPO term      pg = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))   [PPO, DAPO clip-higher]
//   dual clip     if A < 0 and clip_ratio_c > 0: pg = min(pg, -A * clip_ratio_c) = min(pg, c|A|)
//                 [dual-clip PPO, Ye et al. 2020, "Mastering Complex Control in MOBA Games"]
//   TIS weight    w (no gradient) from the trainer/rollout mismatch m = exp(old - rollout) (gspo:
//                 exp(mean_t(old_t - rollout_t))): truncate: w = min(m, tis_cap)  [Yao et al. 2025,
//                 "Your efficient RL framework secretly brings you off-policy RL training"];
//                 icepop: w = m if 1/tis_cap <= m <= tis_cap, else 0 (the token is masked out)
//                 [Ling Team 2025, Ring-1T "IcePop"]. w = 1 without use_tis.
//   KL penalty    kl_coef * k(logp_t, ref_t), with x = logp_t - ref_t:  k2 = x^2 / 2,
//                 k3 = exp(-x) - 1 + x  [Schulman 2020, "Approximating KL divergence"].
//   entropy bonus -entropy_coef * H_t (H_t from the model).
//   token loss    l_t = w * pg(unit of t) + kl_coef * k_t - entropy_coef * H_t
// For gspo the unit term is the same for every token of the sequence, and its gradient reaches
// token t through d lr_s / d logp_t = 1 / n_s (n_s = masked tokens of s).
//
// Aggregation (the minibatch loss L, with D the GLOBAL normaliser, see the contract below):
//   kSeqMeanTokenMean     L = (1/D) sum_s (1/n_s) sum_t l_t, D = sequences (GRPO, Shao et al. 2024)
//   kTokenMean            L = (1/D) sum_s sum_t l_t,         D = tokens    (DAPO, Yu et al. 2025)
//   kSeqMeanTokenSumNorm  L = (1/D) sum_s sum_t l_t,         D = max_tokens * sequences (Dr. GRPO)
// kAlgorithmDefault resolves to: grpo, rloo, gspo -> kSeqMeanTokenMean; dr_grpo ->
// kSeqMeanTokenSumNorm. "sequences" counts only sequences with >= 1 masked token; padding
// contributes to nothing.
//
// NORMALISATION CONTRACT (micro-batch / rank split invariance). Sequences are never split across
// micro-batches, so L is a sum of per-sequence terms. To get exactly the gradient of the whole
// minibatch:
//   1. every micro-batch on every rank calls policy_loss_normaliser() on its own tokens;
//   2. the caller SUMS those over all micro-batches of the minibatch and over all ranks
//      (an all-reduce SUM) into D;
//   3. every micro-batch calls policy_loss() with that same D; its loss and gradients are its
//      share, and the shares SUM (accumulate gradients by +=, reduce them across ranks with SUM,
//      not mean) to the loss and gradient of the whole minibatch.
// Stats are raw sums/counts/extrema, so they also merge (PolicyLossStats::merge) exactly.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "common/status.h"
#include "trainer/advantages.h"

namespace rlrun::trainer {

enum class LossAggregation {
  kAlgorithmDefault,
  kSeqMeanTokenMean,
  kTokenMean,
  kSeqMeanTokenSumNorm,
};
enum class TisMode { kTruncate, kIcepop };
enum class KlEstimator { kK2, kK3 };
// Which log-probs the caller passes as `old_logprobs` (ppo_clip_ref_logprobs). With kRollout the
// PPO ratio already corrects the whole trainer/rollout mismatch, so TIS would be a no-op (w = 1):
// validate_policy_loss_config rejects use_tis there.
enum class ClipReference { kRollout, kBatch };

// "seq_mean_token_mean" | "token_mean" | "seq_mean_token_sum_norm" | "auto"
Result<LossAggregation> parse_loss_aggregation(std::string_view name);
Result<TisMode> parse_tis_mode(std::string_view name);          // "truncate" | "icepop"
Result<KlEstimator> parse_kl_estimator(std::string_view name);  // "k2" | "k3"
Result<ClipReference> parse_clip_reference(std::string_view name);  // "rollout" | "batch"

struct PolicyLossConfig {
  Algorithm algorithm = Algorithm::kGrpo;
  LossAggregation aggregation = LossAggregation::kAlgorithmDefault;
  ClipReference ppo_clip_ref = ClipReference::kRollout;
  double clip_low = 0.2;       // ratio clipped below at 1 - clip_low, in [0, 1)
  double clip_high = 0.2;      // ratio clipped above at 1 + clip_high, >= 0 (DAPO: 0.28)
  double clip_ratio_c = 3.0;   // dual clip for A < 0; 0 disables, else must be > 1 (verl default 3)
  bool use_tis = false;
  double tis_cap = 2.0;        // truncate: > 0; icepop: >= 1 (window [1/cap, cap])
  TisMode tis_mode = TisMode::kTruncate;
  double kl_coef = 0.0;        // >= 0; > 0 requires ref_logprobs
  KlEstimator kl_estimator = KlEstimator::kK3;
  double entropy_coef = 0.0;   // >= 0; > 0 requires entropy
  int64_t max_tokens = 0;      // generation budget; the Dr. GRPO constant (> 0 for that mode)
};

// invalid_argument naming the key and its allowed range, or ok.
Status validate_policy_loss_config(const PolicyLossConfig& config);
LossAggregation resolved_aggregation(const PolicyLossConfig& config);

// All spans cover the micro-batch's N packed tokens unless said otherwise.
struct PolicyLossInputs {
  std::span<const float> logprobs;          // (N) current policy: the variable differentiated
  std::span<const float> old_logprobs;      // (N) PPO clip reference (rollout or batch-recomputed)
  std::span<const float> rollout_logprobs;  // (N) behaviour log-probs; required iff use_tis
  std::span<const float> ref_logprobs;      // (N) KL reference; required iff kl_coef > 0
  std::span<const float> entropy;           // (N) per-token entropy (nats); required iff
                                            //     entropy_coef > 0, else optional (stats only)
  std::span<const float> advantages;        // (S) per sequence, or (N) per token (not for gspo)
  std::span<const uint8_t> loss_mask;       // (N) 1 = trained token, 0 = prompt / padding
  std::span<const int32_t> cu_seqlens;      // (S + 1) sequence s is tokens [cu[s], cu[s+1]);
                                            //     cu[0] = 0, non-decreasing, cu[S] = N
};

// Where the gradients go; each non-empty span has N entries and is OVERWRITTEN (unmasked tokens
// get 0). Empty spans are skipped (loss value only).
struct PolicyLossGrads {
  std::span<float> d_logprobs;  // dL/d logp_t
  std::span<float> d_entropy;   // dL/d H_t (= -entropy_coef * aggregation weight)
};

// Raw sums so micro-batches and ranks merge exactly. "units" are masked tokens, or sequences for
// gspo; clip / TIS counts and ratio / weight statistics are over units, KL and entropy over tokens.
struct PolicyLossStats {
  int64_t tokens = 0;         // masked tokens
  int64_t sequences = 0;      // sequences with >= 1 masked token
  int64_t units = 0;
  int64_t clipped_low = 0;    // A < 0 and r < 1 - clip_low: the clip zeroed the gradient
  int64_t clipped_high = 0;   // A > 0 and r > 1 + clip_high
  int64_t dual_clipped = 0;   // A < 0 and -A r > c|A| (dual clip active)
  int64_t tis_truncated = 0;  // truncate: m > cap; icepop: m outside [1/cap, cap] (zeroed)
  double ratio_sum = 0.0;     // PPO ratio r
  double ratio_min = std::numeric_limits<double>::infinity();
  double ratio_max = -std::numeric_limits<double>::infinity();
  double tis_weight_sum = 0.0;  // w after truncation (1 without TIS)
  double tis_weight_min = std::numeric_limits<double>::infinity();
  double tis_weight_max = -std::numeric_limits<double>::infinity();
  double approx_kl_sum = 0.0;  // k3(current vs old) per token: the policy's drift this step
  double ref_kl_sum = 0.0;     // chosen estimator vs ref_logprobs per token (when given)
  double entropy_sum = 0.0;    // when entropy is given

  void merge(const PolicyLossStats& other);
  double clip_low_fraction() const { return per_unit(static_cast<double>(clipped_low)); }
  double clip_high_fraction() const { return per_unit(static_cast<double>(clipped_high)); }
  double dual_clip_fraction() const { return per_unit(static_cast<double>(dual_clipped)); }
  double tis_truncated_fraction() const { return per_unit(static_cast<double>(tis_truncated)); }
  double ratio_mean() const { return per_unit(ratio_sum); }
  double tis_weight_mean() const { return per_unit(tis_weight_sum); }
  double approx_kl() const { return per_token(approx_kl_sum); }
  double ref_kl() const { return per_token(ref_kl_sum); }
  double entropy_mean() const { return per_token(entropy_sum); }

 private:
  double per_unit(double x) const { return units > 0 ? x / static_cast<double>(units) : 0.0; }
  double per_token(double x) const { return tokens > 0 ? x / static_cast<double>(tokens) : 0.0; }
};

struct PolicyLossResult {
  double loss = 0.0;          // this micro-batch's share of L (= pg + kl + entropy parts)
  double pg_loss = 0.0;       // share of the weighted PPO term
  double kl_loss = 0.0;       // share of kl_coef * k
  double entropy_loss = 0.0;  // share of -entropy_coef * H
  PolicyLossStats stats;
};

// This micro-batch's contribution to the global normaliser D (contract above): its sequences with
// a masked token, its masked tokens, or max_tokens * its sequences, by aggregation mode.
// invalid_argument on malformed cu_seqlens / loss_mask.
Result<double> policy_loss_normaliser(const PolicyLossConfig& config,
                                      std::span<const uint8_t> loss_mask,
                                      std::span<const int32_t> cu_seqlens);

// Loss share, gradients and stats of one micro-batch. `global_normaliser` is D (> 0). Inputs come
// from the network and the model, so every size, boundary and masked value is checked:
// invalid_argument names the array and index at fault (e.g. a non-finite rollout log-prob).
Result<PolicyLossResult> policy_loss(const PolicyLossConfig& config, const PolicyLossInputs& in,
                                     double global_normaliser, const PolicyLossGrads& grads);

}  // namespace rlrun::trainer
