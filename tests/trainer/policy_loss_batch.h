// policy_loss_batch.h - a small owned packed batch for the policy-loss tests: vectors that
// PolicyLossInputs / PolicyLossGrads view, and builders that write log-probs from chosen ratios.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "trainer/policy_loss.h"

namespace rlrun::trainer::testing_batch {

struct Batch {
  std::vector<float> logprobs, old_logprobs, rollout_logprobs, ref_logprobs, entropy, advantages;
  std::vector<uint8_t> loss_mask;
  std::vector<int32_t> cu_seqlens = {0};
  std::vector<float> d_logprobs, d_entropy;

  size_t size() const { return logprobs.size(); }

  // Appends a token whose PPO ratio exp(logp - old) is `ratio`, with old = base.
  void add_token(double ratio, bool masked, double base = -1.0) {
    old_logprobs.push_back(static_cast<float>(base));
    logprobs.push_back(static_cast<float>(base + std::log(ratio)));
    rollout_logprobs.push_back(static_cast<float>(base));
    ref_logprobs.push_back(static_cast<float>(base));
    entropy.push_back(1.0f);
    loss_mask.push_back(masked ? 1 : 0);
  }
  // Closes the current sequence (tokens since the last boundary) with a per-sequence advantage.
  void end_sequence(float advantage) {
    cu_seqlens.push_back(static_cast<int32_t>(logprobs.size()));
    advantages.push_back(advantage);
  }

  PolicyLossInputs inputs(const PolicyLossConfig& c) const {
    PolicyLossInputs in;
    in.logprobs = logprobs;
    in.old_logprobs = old_logprobs;
    if (c.use_tis) in.rollout_logprobs = rollout_logprobs;
    if (c.kl_coef > 0.0) in.ref_logprobs = ref_logprobs;
    if (c.entropy_coef > 0.0) in.entropy = entropy;
    in.advantages = advantages;
    in.loss_mask = loss_mask;
    in.cu_seqlens = cu_seqlens;
    return in;
  }
  PolicyLossGrads grads() {
    d_logprobs.assign(size(), 123.0f);  // poison: the loss must overwrite every entry
    d_entropy.assign(size(), 123.0f);
    return {d_logprobs, d_entropy};
  }
  // Loss and grads with this batch alone as the minibatch (D from its own tokens).
  PolicyLossResult run(const PolicyLossConfig& c) {
    auto d = policy_loss_normaliser(c, loss_mask, cu_seqlens);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    auto r = policy_loss(c, inputs(c), *d, grads());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : PolicyLossResult{};
  }
};

}  // namespace rlrun::trainer::testing_batch
