// The policy loss against hand-computed references on small packed batches: each clip regime,
// dual clip, TIS truncation and icepop masking, KL k2 / k3, the entropy bonus, gspo, and the three
// aggregations. Then config and input validation. Gradients vs finite differences and micro-batch
// invariance are in policy_loss_grad_test.cc.
#include "trainer/policy_loss.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/trainer/policy_loss_batch.h"

namespace rlrun::trainer {
namespace {

using testing_batch::Batch;
constexpr double kTol = 2e-6;

PolicyLossConfig grpo_config() {
  PolicyLossConfig c;
  c.algorithm = Algorithm::kGrpo;
  c.clip_low = 0.2;    // ratio floor 0.8
  c.clip_high = 0.28;  // ratio ceiling 1.28
  c.clip_ratio_c = 3.0;
  return c;
}

// seq 0: prompt token (unmasked), r = 1.1, r = 1.5;   A = +1
// seq 1: r = 0.5, r = 0.9, r = 4.0;                   A = -2
// seq 2: two padding tokens (unmasked);                A = 0
// Per token PPO term pg = max(-A r, -A clip(r, 0.8, 1.28)), dual clip min(pg, 3|A|) for A < 0:
//   r=1.1 A=+1: -1.1 (inside, d/dlr = -A r = -1.1)
//   r=1.5 A=+1: max(-1.5, -1.28) = -1.28  clipped high, d = 0
//   r=0.5 A=-2: max(1.0, 1.6) = 1.6        clipped low,  d = 0
//   r=0.9 A=-2: 1.8                        (inside, d = -A r = 1.8)
//   r=4.0 A=-2: max(8, 2.56) = 8 -> min(8, 6) = 6   dual clipped, d = 0
Batch clip_batch() {
  Batch b;
  b.add_token(1.0, false);
  b.add_token(1.1, true);
  b.add_token(1.5, true);
  b.end_sequence(+1.0f);
  b.add_token(0.5, true);
  b.add_token(0.9, true);
  b.add_token(4.0, true);
  b.end_sequence(-2.0f);
  b.add_token(1.0, false);
  b.add_token(1.0, false);
  b.end_sequence(0.0f);
  return b;
}

TEST(PolicyLoss, GrpoSeqMeanTokenMeanClipRegimes) {
  Batch b = clip_batch();
  const PolicyLossResult r = b.run(grpo_config());
  // D = 2 sequences (the padding one has no masked token).
  // L = 1/2 * [ (-1.1 - 1.28)/2 + (1.6 + 1.8 + 6)/3 ] = 1/2 * (-1.19 + 3.1333333) = 0.9716667
  EXPECT_NEAR(r.loss, 0.9716667, kTol);
  EXPECT_NEAR(r.pg_loss, 0.9716667, kTol);
  EXPECT_EQ(r.kl_loss, 0.0);
  // dL/dlogp: token 1: -1.1 / (2 tokens * 2 seqs) = -0.275; token 4: 1.8 / (3 * 2) = 0.3; the
  // clipped, dual-clipped, prompt and padding tokens get exactly 0.
  EXPECT_THAT(b.d_logprobs, testing::Pointwise(testing::FloatNear(kTol),
                                               {0.0f, -0.275f, 0.0f, 0.0f, 0.3f, 0.0f, 0.0f, 0.0f}));
  EXPECT_THAT(b.d_entropy, testing::Each(0.0f));
  const PolicyLossStats& s = r.stats;
  EXPECT_EQ(s.tokens, 5);
  EXPECT_EQ(s.sequences, 2);
  EXPECT_EQ(s.units, 5);
  EXPECT_EQ(s.clipped_low, 1);
  EXPECT_EQ(s.clipped_high, 1);
  EXPECT_EQ(s.dual_clipped, 1);
  EXPECT_NEAR(s.clip_low_fraction(), 0.2, 1e-12);
  EXPECT_NEAR(s.ratio_mean(), (1.1 + 1.5 + 0.5 + 0.9 + 4.0) / 5, kTol);  // 1.6
  EXPECT_NEAR(s.ratio_min, 0.5, kTol);
  EXPECT_NEAR(s.ratio_max, 4.0, 1e-5);
  EXPECT_EQ(s.tis_weight_mean(), 1.0);  // no TIS
  EXPECT_EQ(s.tis_truncated, 0);
  // approx KL = mean k3 = mean(1/r - 1 + ln r): 0.0044011 + 0.0721318 + 0.3068528 + 0.0057506
  // + 0.6362944 = 1.0254306, / 5 = 0.2050861.
  EXPECT_NEAR(s.approx_kl(), 0.2050861, kTol);
}

TEST(PolicyLoss, RlooAggregatesLikeGrpo) {
  Batch b = clip_batch();
  PolicyLossConfig c = grpo_config();
  c.algorithm = Algorithm::kRloo;
  EXPECT_NEAR(b.run(c).loss, 0.9716667, kTol);
}

TEST(PolicyLoss, TokenMeanAggregation) {
  Batch b = clip_batch();
  PolicyLossConfig c = grpo_config();
  c.aggregation = LossAggregation::kTokenMean;
  // D = 5 masked tokens: L = (-1.1 - 1.28 + 1.6 + 1.8 + 6) / 5 = 7.02 / 5 = 1.404
  EXPECT_NEAR(b.run(c).loss, 1.404, kTol);
  // token 1: -1.1 / 5 = -0.22; token 4: 1.8 / 5 = 0.36
  EXPECT_NEAR(b.d_logprobs[1], -0.22, kTol);
  EXPECT_NEAR(b.d_logprobs[4], 0.36, kTol);
}

TEST(PolicyLoss, DrGrpoDividesByMaxTokensTimesSequences) {
  Batch b = clip_batch();
  PolicyLossConfig c = grpo_config();
  c.algorithm = Algorithm::kDrGrpo;
  c.max_tokens = 4;
  // D = max_tokens * sequences = 4 * 2 = 8: L = 7.02 / 8 = 0.8775
  EXPECT_NEAR(b.run(c).loss, 0.8775, kTol);
  EXPECT_NEAR(b.d_logprobs[1], -1.1 / 8, kTol);  // -0.1375
  EXPECT_NEAR(b.d_logprobs[4], 1.8 / 8, kTol);   // 0.225
}

TEST(PolicyLoss, DualClipDisabled) {
  Batch b = clip_batch();
  PolicyLossConfig c = grpo_config();
  c.clip_ratio_c = 0.0;
  // token 5 (r = 4, A = -2) now keeps pg = 8 with d = -A r = 8:
  // L = 1/2 * [ -1.19 + (1.6 + 1.8 + 8)/3 ] = 1/2 * (-1.19 + 3.8) = 1.305
  const PolicyLossResult r = b.run(c);
  EXPECT_NEAR(r.loss, 1.305, kTol);
  EXPECT_NEAR(b.d_logprobs[5], 8.0 / 6.0, 1e-5);  // 8 / (3 tokens * 2 seqs)
  EXPECT_EQ(r.stats.dual_clipped, 0);
}

// One sequence, A = +1, ratios {1.0, 1.1, 1.0}, trainer/rollout mismatch m = exp(old - rollout)
// of {3.0, 0.4, 1.5}, tis_cap 2, D = 1 sequence.
Batch tis_batch() {
  Batch b;
  const double ratios[] = {1.0, 1.1, 1.0}, mismatch[] = {3.0, 0.4, 1.5};
  for (int i = 0; i < 3; ++i) {
    b.add_token(ratios[i], true);
    b.rollout_logprobs.back() = static_cast<float>(-1.0 - std::log(mismatch[i]));
  }
  b.end_sequence(1.0f);
  return b;
}

PolicyLossConfig tis_config(TisMode mode) {
  PolicyLossConfig c = grpo_config();
  c.ppo_clip_ref = ClipReference::kBatch;
  c.use_tis = true;
  c.tis_cap = 2.0;
  c.tis_mode = mode;
  return c;
}

TEST(PolicyLoss, TisTruncate) {
  Batch b = tis_batch();
  const PolicyLossResult r = b.run(tis_config(TisMode::kTruncate));
  // w = min(m, 2) = {2, 0.4, 1.5} (the first truncated); pg = -A r = {-1, -1.1, -1}.
  // L = (2 * -1 + 0.4 * -1.1 + 1.5 * -1) / 3 = -3.94 / 3 = -1.3133333
  EXPECT_NEAR(r.loss, -1.3133333, kTol);
  // d = w * (-A r) / 3 = {-0.6666667, -0.1466667, -0.5}
  EXPECT_THAT(b.d_logprobs,
              testing::Pointwise(testing::FloatNear(kTol), {-0.6666667f, -0.1466667f, -0.5f}));
  EXPECT_EQ(r.stats.tis_truncated, 1);
  EXPECT_NEAR(r.stats.tis_weight_mean(), (2 + 0.4 + 1.5) / 3, kTol);  // 1.3
  EXPECT_NEAR(r.stats.tis_weight_min, 0.4, kTol);
  EXPECT_NEAR(r.stats.tis_weight_max, 2.0, kTol);
}

TEST(PolicyLoss, TisIcepopZeroesOutsideTheWindow) {
  Batch b = tis_batch();
  const PolicyLossResult r = b.run(tis_config(TisMode::kIcepop));
  // window [1/2, 2]: m = 3 and m = 0.4 are outside -> w = 0; m = 1.5 inside -> w = 1.5.
  // L = (0 + 0 + 1.5 * -1) / 3 = -0.5; d = {0, 0, -0.5}
  EXPECT_NEAR(r.loss, -0.5, kTol);
  EXPECT_THAT(b.d_logprobs, testing::Pointwise(testing::FloatNear(kTol), {0.0f, 0.0f, -0.5f}));
  EXPECT_EQ(r.stats.tis_truncated, 2);
  EXPECT_NEAR(r.stats.tis_truncated_fraction(), 2.0 / 3.0, 1e-12);
}

// One sequence of two tokens with A = 0 (no PPO term), x = logp - ref of {0.5, -0.3},
// kl_coef 0.1, D = 1 sequence: each token's aggregation weight is 1/2.
Batch kl_batch() {
  Batch b;
  const double x[] = {0.5, -0.3};
  for (double xi : x) {
    b.add_token(1.0, true);
    b.ref_logprobs.back() = static_cast<float>(b.logprobs.back() - xi);
  }
  b.end_sequence(0.0f);
  return b;
}

TEST(PolicyLoss, KlK2) {
  Batch b = kl_batch();
  PolicyLossConfig c = grpo_config();
  c.kl_coef = 0.1;
  c.kl_estimator = KlEstimator::kK2;
  const PolicyLossResult r = b.run(c);
  // k2 = x^2/2 = {0.125, 0.045}; L = 0.1 * (0.125 + 0.045) / 2 = 0.0085
  EXPECT_NEAR(r.loss, 0.0085, kTol);
  EXPECT_NEAR(r.kl_loss, 0.0085, kTol);
  EXPECT_EQ(r.pg_loss, 0.0);
  EXPECT_NEAR(r.stats.ref_kl(), 0.085, kTol);
  // d = 0.1 * x / 2 = {0.025, -0.015}
  EXPECT_THAT(b.d_logprobs, testing::Pointwise(testing::FloatNear(kTol), {0.025f, -0.015f}));
}

TEST(PolicyLoss, KlK3) {
  Batch b = kl_batch();
  PolicyLossConfig c = grpo_config();
  c.kl_coef = 0.1;
  c.kl_estimator = KlEstimator::kK3;
  const PolicyLossResult r = b.run(c);
  // k3 = e^-x - 1 + x: x=0.5: 0.6065307 - 0.5 = 0.1065307; x=-0.3: 1.3498588 - 1.3 = 0.0498588
  // L = 0.1 * (0.1065307 + 0.0498588) / 2 = 0.0078195
  EXPECT_NEAR(r.loss, 0.0078195, kTol);
  // d = 0.1 / 2 * (1 - e^-x) = {0.05 * 0.3934693, 0.05 * -0.3498588} = {0.0196735, -0.0174929}
  EXPECT_THAT(b.d_logprobs, testing::Pointwise(testing::FloatNear(kTol), {0.0196735f, -0.0174929f}));
}

TEST(PolicyLoss, EntropyBonus) {
  Batch b = kl_batch();
  b.entropy = {1.2f, 0.8f};
  PolicyLossConfig c = grpo_config();
  c.entropy_coef = 0.01;
  const PolicyLossResult r = b.run(c);
  // L = -0.01 * (1.2 + 0.8) / 2 = -0.01; dL/dH = -0.01 / 2 = -0.005 per token
  EXPECT_NEAR(r.loss, -0.01, kTol);
  EXPECT_NEAR(r.entropy_loss, -0.01, kTol);
  EXPECT_THAT(b.d_entropy, testing::Pointwise(testing::FloatNear(1e-9), {-0.005f, -0.005f}));
  EXPECT_THAT(b.d_logprobs, testing::Each(0.0f));
  EXPECT_NEAR(r.stats.entropy_mean(), 1.0, kTol);
}

TEST(PolicyLoss, GspoSequenceRatio) {
  Batch b;
  // seq 0: prompt token + ratios {1.2, 0.9, 1.1}, A = +1:
  //   s = (1.2 * 0.9 * 1.1)^(1/3) = 1.188^(1/3) = 1.0591045, inside [0.8, 1.2] -> pg = -1.0591045
  b.add_token(1.0, false);
  for (double r : {1.2, 0.9, 1.1}) b.add_token(r, true);
  b.end_sequence(1.0f);
  // seq 1: ratios {1.5, 1.5}, A = +1: s = 1.5 > 1.2 -> clipped high: pg = -1.2, d = 0
  for (int i = 0; i < 2; ++i) b.add_token(1.5, true);
  b.end_sequence(1.0f);
  // seq 2: ratios {0.5}, A = -1: s = 0.5 < 0.8 -> clipped low: pg = max(0.5, 0.8) = 0.8, d = 0
  b.add_token(0.5, true);
  b.end_sequence(-1.0f);
  PolicyLossConfig c = grpo_config();
  c.algorithm = Algorithm::kGspo;
  c.clip_high = 0.2;
  const PolicyLossResult r = b.run(c);
  // D = 3 sequences; each sequence's token-mean of its (constant) unit loss is the unit loss:
  // L = (-1.0591045 - 1.2 + 0.8) / 3 = -0.4863682
  EXPECT_NEAR(r.loss, -0.4863682, kTol);
  // seq 0 tokens: d = (1/D) * d(-A s)/dlogp_t = (1/3) * (-s / 3) = -0.1176783 (s/3 = 0.3530348)
  const float g = -0.1176783f;
  EXPECT_THAT(b.d_logprobs,
              testing::Pointwise(testing::FloatNear(kTol), {0.0f, g, g, g, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(r.stats.units, 3);  // sequences
  EXPECT_EQ(r.stats.tokens, 6);
  EXPECT_EQ(r.stats.clipped_high, 1);
  EXPECT_EQ(r.stats.clipped_low, 1);
  EXPECT_NEAR(r.stats.ratio_mean(), (1.0591045 + 1.5 + 0.5) / 3, kTol);
}

TEST(PolicyLoss, HugeLogRatioStaysFinite) {
  Batch b;
  b.add_token(1.0, true);
  b.logprobs[0] = b.old_logprobs[0] + 50.0f;  // a corrupt or wildly stale log-prob
  b.end_sequence(-1.0f);
  PolicyLossConfig c = grpo_config();
  c.clip_ratio_c = 0.0;  // nothing bounds -A r: the clamp at log r = 20 must
  const PolicyLossResult r = b.run(c);
  EXPECT_NEAR(r.loss, std::exp(20.0), 1e-3);
  EXPECT_EQ(b.d_logprobs[0], 0.0f);
}

TEST(PolicyLoss, GspoTisUsesTheSequenceMismatch) {
  Batch b;
  // Two tokens, ratios 1 (s = 1), A = +1, mismatch m_t = {4, 1}: the sequence mismatch is the
  // geometric mean sqrt(4 * 1) = 2 -> truncate at cap 1.5: w = 1.5, L = 1.5 * -1 = -1.5;
  // d/dlogp_t = w * (-A s) / n_s = -1.5 / 2 = -0.75 for each token.
  for (double m : {4.0, 1.0}) {
    b.add_token(1.0, true);
    b.rollout_logprobs.back() = static_cast<float>(-1.0 - std::log(m));
  }
  b.end_sequence(1.0f);
  PolicyLossConfig c = tis_config(TisMode::kTruncate);
  c.algorithm = Algorithm::kGspo;
  c.tis_cap = 1.5;
  const PolicyLossResult r = b.run(c);
  EXPECT_NEAR(r.loss, -1.5, kTol);
  EXPECT_THAT(b.d_logprobs, testing::Pointwise(testing::FloatNear(kTol), {-0.75f, -0.75f}));
  EXPECT_EQ(r.stats.tis_truncated, 1);
}

TEST(PolicyLossConfig, Validation) {
  EXPECT_TRUE(validate_policy_loss_config(grpo_config()).ok());
  auto message = [](PolicyLossConfig c) { return validate_policy_loss_config(c).message(); };
  PolicyLossConfig c = grpo_config();
  c.clip_ratio_c = 0.5;
  EXPECT_THAT(message(c), testing::HasSubstr("clip_ratio_c"));
  c = grpo_config();
  c.clip_low = 1.0;
  EXPECT_THAT(message(c), testing::HasSubstr("clip_low"));
  c = tis_config(TisMode::kIcepop);
  c.tis_cap = 1.0;
  EXPECT_THAT(message(c), testing::HasSubstr("tis_cap"));
  c = tis_config(TisMode::kTruncate);
  c.ppo_clip_ref = ClipReference::kRollout;
  EXPECT_THAT(message(c), testing::HasSubstr("ppo_clip_ref_logprobs: batch"));
  c = grpo_config();
  c.algorithm = Algorithm::kDrGrpo;  // its default aggregation needs max_tokens
  EXPECT_THAT(message(c), testing::HasSubstr("max_tokens"));
  c.max_tokens = 512;
  EXPECT_TRUE(validate_policy_loss_config(c).ok());
  c = grpo_config();
  c.kl_coef = -1.0;
  EXPECT_THAT(message(c), testing::HasSubstr("kl_coef"));
}

TEST(PolicyLossConfig, NamesAndDefaults) {
  EXPECT_EQ(*parse_loss_aggregation("token_mean"), LossAggregation::kTokenMean);
  EXPECT_EQ(*parse_tis_mode("icepop"), TisMode::kIcepop);
  EXPECT_EQ(*parse_kl_estimator("k2"), KlEstimator::kK2);
  EXPECT_EQ(*parse_clip_reference("batch"), ClipReference::kBatch);
  EXPECT_FALSE(parse_tis_mode("clip").ok());
  EXPECT_FALSE(parse_kl_estimator("k1").ok());
  PolicyLossConfig c;
  for (Algorithm a : {Algorithm::kGrpo, Algorithm::kRloo, Algorithm::kGspo}) {
    c.algorithm = a;
    EXPECT_EQ(resolved_aggregation(c), LossAggregation::kSeqMeanTokenMean);
  }
  c.algorithm = Algorithm::kDrGrpo;
  EXPECT_EQ(resolved_aggregation(c), LossAggregation::kSeqMeanTokenSumNorm);
  c.aggregation = LossAggregation::kTokenMean;
  EXPECT_EQ(resolved_aggregation(c), LossAggregation::kTokenMean);
}

// Malformed inputs (they come over the network) are errors naming the array, never crashes.
TEST(PolicyLoss, RejectsMalformedInputs) {
  const PolicyLossConfig c = grpo_config();
  auto error_of = [&](const Batch& b, double d = 2.0) {
    auto r = policy_loss(c, b.inputs(c), d, {});
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_EQ(error_of(clip_batch()), "ok");
  Batch b = clip_batch();
  b.cu_seqlens = {0, 3, 2, 8};
  EXPECT_THAT(error_of(b), testing::HasSubstr("cu_seqlens decreases"));
  b.cu_seqlens = {0, 3, 6, 9};
  EXPECT_THAT(error_of(b), testing::HasSubstr("cu_seqlens ends at 9"));
  b.cu_seqlens = {1, 3, 6, 8};
  EXPECT_THAT(error_of(b), testing::HasSubstr("start with 0"));
  b = clip_batch();
  b.old_logprobs[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(error_of(b), testing::HasSubstr("old_logprobs[4]"));
  b.old_logprobs[4] = -1.0f;
  b.old_logprobs[7] = std::numeric_limits<float>::quiet_NaN();  // a padding token: ignored
  EXPECT_EQ(error_of(b), "ok");
  b = clip_batch();
  b.advantages.pop_back();
  EXPECT_THAT(error_of(b), testing::HasSubstr("2 advantages for 3 sequences"));
  b = clip_batch();
  b.loss_mask.pop_back();
  EXPECT_THAT(error_of(b), testing::HasSubstr("loss_mask"));
  EXPECT_THAT(error_of(clip_batch(), 0.0), testing::HasSubstr("normaliser"));

  PolicyLossConfig kl = c;
  kl.kl_coef = 0.1;
  b = clip_batch();
  PolicyLossInputs in = b.inputs(kl);
  in.ref_logprobs = {};
  EXPECT_THAT(policy_loss(kl, in, 2.0, {}).status().message(), testing::HasSubstr("ref_logprobs"));
  PolicyLossConfig gspo = c;
  gspo.algorithm = Algorithm::kGspo;
  std::vector<float> per_token(b.size(), 1.0f);
  in = b.inputs(gspo);
  in.advantages = per_token;
  EXPECT_THAT(policy_loss(gspo, in, 2.0, {}).status().message(), testing::HasSubstr("gspo"));
}

}  // namespace
}  // namespace rlrun::trainer
