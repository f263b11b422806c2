// Gradients of the policy loss against central finite differences of the loss itself, and the
// micro-batch contract: split a minibatch into micro-batches, give each the summed global
// normaliser, and the loss shares, gradients and stats add up to the unsplit result.
// Random packed batches (seeded) over every algorithm / aggregation / TIS / KL / entropy option.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/trainer/policy_loss_batch.h"
#include "trainer/policy_loss.h"

namespace rlrun::trainer {
namespace {

using testing_batch::Batch;

struct NamedConfig {
  std::string name;
  PolicyLossConfig config;
  bool per_token_advantages = false;
};

std::vector<NamedConfig> all_configs() {
  std::vector<NamedConfig> out;
  PolicyLossConfig base;
  base.clip_low = 0.2;
  base.clip_high = 0.28;
  base.clip_ratio_c = 3.0;
  base.max_tokens = 16;
  auto add = [&](std::string name, auto edit, bool per_token = false) {
    PolicyLossConfig c = base;
    edit(c);
    out.push_back({std::move(name), c, per_token});
  };
  add("grpo_k3_entropy", [](PolicyLossConfig& c) { c.kl_coef = 0.05; c.entropy_coef = 0.01; });
  add("grpo_token_mean_k2_no_dual", [](PolicyLossConfig& c) {
    c.aggregation = LossAggregation::kTokenMean;
    c.clip_ratio_c = 0.0;
    c.kl_coef = 0.1;
    c.kl_estimator = KlEstimator::kK2;
  });
  add("grpo_per_token_advantages", [](PolicyLossConfig&) {}, true);
  add("dr_grpo_tis_truncate", [](PolicyLossConfig& c) {
    c.algorithm = Algorithm::kDrGrpo;
    c.ppo_clip_ref = ClipReference::kBatch;
    c.use_tis = true;
    c.tis_cap = 1.5;
  });
  add("rloo_icepop_k3", [](PolicyLossConfig& c) {
    c.algorithm = Algorithm::kRloo;
    c.ppo_clip_ref = ClipReference::kBatch;
    c.use_tis = true;
    c.tis_mode = TisMode::kIcepop;
    c.kl_coef = 0.02;
  });
  add("gspo_tis_k2_entropy", [](PolicyLossConfig& c) {
    c.algorithm = Algorithm::kGspo;
    c.ppo_clip_ref = ClipReference::kBatch;
    c.use_tis = true;
    c.kl_coef = 0.1;
    c.kl_estimator = KlEstimator::kK2;
    c.entropy_coef = 0.02;
  });
  add("gspo_token_mean_icepop", [](PolicyLossConfig& c) {
    c.algorithm = Algorithm::kGspo;
    c.aggregation = LossAggregation::kTokenMean;
    c.ppo_clip_ref = ClipReference::kBatch;
    c.use_tis = true;
    c.tis_mode = TisMode::kIcepop;
  });
  return out;
}

// Log-ratios at least `margin` away from every kink of the PPO term (clip bounds, dual clip), so
// a central difference with step << margin never straddles one.
bool near_kink(const PolicyLossConfig& c, double log_ratio, double margin) {
  const double kinks[] = {std::log(1.0 - c.clip_low), std::log(1.0 + c.clip_high),
                          c.clip_ratio_c > 0 ? std::log(c.clip_ratio_c) : 1e9};
  for (double k : kinks) {
    if (std::abs(log_ratio - k) < margin) return true;
  }
  return false;
}

// num_seqs sequences of 1..7 tokens: 0-2 prompt tokens, completions with an occasional unmasked
// token (e.g. tool output), and one all-padding sequence. Log-ratios in [-1.5, 1.5] hit every
// clip regime; the trainer/rollout mismatch spans both sides of the TIS window.
Batch random_batch(std::mt19937& rng, const NamedConfig& nc, int num_seqs) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const PolicyLossConfig& c = nc.config;
  const bool gspo = c.algorithm == Algorithm::kGspo;
  Batch b;
  for (int s = 0; s < num_seqs; ++s) {
    const bool padding = s == num_seqs / 2;
    const size_t first = b.size();
    const int len = 1 + static_cast<int>(u(rng) * 7);
    const int prompt = static_cast<int>(u(rng) * 3);
    for (int i = 0; i < len; ++i) {
      double lr;
      do lr = -1.5 + 3.0 * u(rng); while (!gspo && near_kink(c, lr, 0.02));
      const bool masked = !padding && i >= prompt && u(rng) > 0.1;
      b.add_token(std::exp(lr), masked, -3.0 + 2.9 * u(rng));
      b.rollout_logprobs.back() = b.old_logprobs.back() - static_cast<float>(-1.2 + 2.4 * u(rng));
      b.ref_logprobs.back() = b.logprobs.back() - static_cast<float>(-0.7 + 1.4 * u(rng));
      b.entropy.back() = static_cast<float>(3.0 * u(rng));
    }
    if (gspo) {  // keep the sequence's mean log-ratio off the kinks by shifting the whole sequence
      double sum = 0.0;
      int n = 0;
      for (size_t t = first; t < b.size(); ++t) {
        if (b.loss_mask[t]) sum += double(b.logprobs[t]) - b.old_logprobs[t], ++n;
      }
      while (n > 0 && near_kink(c, sum / n, 0.02)) {
        for (size_t t = first; t < b.size(); ++t) b.logprobs[t] += 0.05f;
        sum += 0.05 * n;
      }
    }
    const float adv = static_cast<float>((u(rng) < 0.5 ? -1.0 : 1.0) * (0.2 + 1.8 * u(rng)));
    b.end_sequence(adv);
  }
  if (nc.per_token_advantages) {
    std::vector<float> per_token(b.size());
    for (float& a : per_token) a = static_cast<float>(-2.0 + 4.0 * u(rng));
    b.advantages = per_token;
  }
  return b;
}

double loss_of(const PolicyLossConfig& c, const Batch& b, double d) {
  auto r = policy_loss(c, b.inputs(c), d, {});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->loss : 0.0;
}

// Central difference of the loss in one float input; the step is the one the floats really took.
double central_difference(const PolicyLossConfig& c, Batch& b, std::vector<float>& v, size_t t,
                          double d) {
  const float x = v[t], h = 1e-3f;
  v[t] = x + h;
  const double up_x = v[t], up = loss_of(c, b, d);
  v[t] = x - h;
  const double down_x = v[t], down = loss_of(c, b, d);
  v[t] = x;
  return (up - down) / (up_x - down_x);
}

TEST(PolicyLossGrad, MatchesFiniteDifferences) {
  std::mt19937 rng(1234);
  PolicyLossStats coverage;
  for (const NamedConfig& nc : all_configs()) {
    SCOPED_TRACE(nc.name);
    const PolicyLossConfig& c = nc.config;
    Batch b = random_batch(rng, nc, 6);
    const double d = *policy_loss_normaliser(c, b.loss_mask, b.cu_seqlens);
    auto r = policy_loss(c, b.inputs(c), d, b.grads());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    coverage.merge(r->stats);
    for (size_t t = 0; t < b.size(); ++t) {
      const double fd = central_difference(c, b, b.logprobs, t, d);
      EXPECT_NEAR(b.d_logprobs[t], fd, 2e-5 + 1e-3 * std::abs(fd)) << "d_logprobs[" << t << "]";
      if (c.entropy_coef > 0.0) {
        const double fd_h = central_difference(c, b, b.entropy, t, d);
        EXPECT_NEAR(b.d_entropy[t], fd_h, 1e-6) << "d_entropy[" << t << "]";
      }
      if (!b.loss_mask[t]) {
        EXPECT_EQ(b.d_logprobs[t], 0.0f);
      }
    }
  }
  // The random batches must exercise every regime, or the test proves less than it claims.
  EXPECT_GT(coverage.clipped_low, 0);
  EXPECT_GT(coverage.clipped_high, 0);
  EXPECT_GT(coverage.dual_clipped, 0);
  EXPECT_GT(coverage.tis_truncated, 0);
  EXPECT_LT(coverage.clipped_low + coverage.clipped_high + coverage.dual_clipped, coverage.units);
}

// Sequences [first, last) of b as a micro-batch of their own.
Batch slice(const Batch& b, size_t first, size_t last, bool per_token_advantages) {
  Batch m;
  const size_t begin = b.cu_seqlens[first], end = b.cu_seqlens[last];
  auto cut = [&](const auto& v) { return std::vector(v.begin() + begin, v.begin() + end); };
  m.logprobs = cut(b.logprobs);
  m.old_logprobs = cut(b.old_logprobs);
  m.rollout_logprobs = cut(b.rollout_logprobs);
  m.ref_logprobs = cut(b.ref_logprobs);
  m.entropy = cut(b.entropy);
  m.loss_mask = cut(b.loss_mask);
  m.advantages = per_token_advantages
                     ? cut(b.advantages)
                     : std::vector(b.advantages.begin() + first, b.advantages.begin() + last);
  for (size_t s = first + 1; s <= last; ++s) m.cu_seqlens.push_back(b.cu_seqlens[s] - begin);
  return m;
}

TEST(PolicyLossGrad, MicroBatchSplitMatchesTheWholeMinibatch) {
  std::mt19937 rng(99);
  for (const NamedConfig& nc : all_configs()) {
    SCOPED_TRACE(nc.name);
    const PolicyLossConfig& c = nc.config;
    Batch whole = random_batch(rng, nc, 8);
    const double d_whole = *policy_loss_normaliser(c, whole.loss_mask, whole.cu_seqlens);
    const PolicyLossResult full = *policy_loss(c, whole.inputs(c), d_whole, whole.grads());

    // Three micro-batches (as if on different ranks): sequences [0,3), [3,4), [4,8).
    std::vector<Batch> micro = {slice(whole, 0, 3, nc.per_token_advantages),
                                slice(whole, 3, 4, nc.per_token_advantages),
                                slice(whole, 4, 8, nc.per_token_advantages)};
    double d_global = 0.0;  // step 2 of the contract: the all-reduce SUM of local normalisers
    for (Batch& m : micro) d_global += *policy_loss_normaliser(c, m.loss_mask, m.cu_seqlens);
    EXPECT_DOUBLE_EQ(d_global, d_whole);

    double loss = 0.0, naive_loss = 0.0;
    PolicyLossStats stats;
    std::vector<float> d_logprobs, d_entropy;
    for (Batch& m : micro) {
      auto r = policy_loss(c, m.inputs(c), d_global, m.grads());
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      loss += r->loss;
      stats.merge(r->stats);
      d_logprobs.insert(d_logprobs.end(), m.d_logprobs.begin(), m.d_logprobs.end());
      d_entropy.insert(d_entropy.end(), m.d_entropy.begin(), m.d_entropy.end());
      // The mistake the contract prevents: normalising each micro-batch by itself.
      const double local = *policy_loss_normaliser(c, m.loss_mask, m.cu_seqlens);
      if (local > 0) naive_loss += policy_loss(c, m.inputs(c), local, {})->loss / micro.size();
    }
    EXPECT_NEAR(loss, full.loss, 1e-12 * (1 + std::abs(full.loss)));
    EXPECT_GT(std::abs(naive_loss - full.loss), 1e-6) << "the split should matter without the contract";
    EXPECT_THAT(d_logprobs, testing::Pointwise(testing::FloatNear(1e-7f), whole.d_logprobs));
    EXPECT_THAT(d_entropy, testing::Pointwise(testing::FloatNear(1e-7f), whole.d_entropy));
    EXPECT_EQ(stats.tokens, full.stats.tokens);
    EXPECT_EQ(stats.units, full.stats.units);
    EXPECT_EQ(stats.clipped_low, full.stats.clipped_low);
    EXPECT_EQ(stats.clipped_high, full.stats.clipped_high);
    EXPECT_EQ(stats.tis_truncated, full.stats.tis_truncated);
    EXPECT_NEAR(stats.ratio_sum, full.stats.ratio_sum, 1e-9);
    EXPECT_EQ(stats.ratio_max, full.stats.ratio_max);
    EXPECT_NEAR(stats.approx_kl_sum, full.stats.approx_kl_sum, 1e-9);
  }
}

}  // namespace
}  // namespace rlrun::trainer
