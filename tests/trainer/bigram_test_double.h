// bigram_test_double.h - TEST DOUBLE: a tiny differentiable stand-in for the decoder, so the
// trainer's optimizer, reduction and accumulation logic can be tested in milliseconds and without
// the model branch. Not a language model.
//
// logits[t] = table[input_ids[t], :] + bias   (table (V, V), bias (V)), log-softmax over V;
// logprob[t] = log p(targets[t]) (0 when the target is < 0), entropy[t] = -sum p log p.
// Flat layout: table at 0, then alignment padding, bias at a 64-element boundary, so P is odd for
// V = 7 (71) and a 2-rank distributed optimizer has a tail element. Host backends only.
// weight_dtype bf16 gives it what a bf16 device backend gives the decoder: forward reads a bf16
// copy of the f32 master (2 B/param beside 4), which release_master() frees: the trainer's
// distributed optimizer then keeps the master of its shard (trainer/optimizer.h). Gradients f32.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "trainer/trainable_model.h"

namespace rlrun::trainer::testing {

class BigramTestDouble : public TrainableModel {
 public:
  BigramTestDouble(engine::Backend& backend, int64_t vocab, uint64_t seed,
                   engine::DType weight_dtype = engine::DType::kF32)
      : backend_(backend), vocab_(vocab) {
    RLRUN_CHECK(backend.is_host(), "the bigram test double runs on host backends only");
    const int64_t bias_at = (vocab * vocab + 63) / 64 * 64;
    specs_ = {{"bigram.table", {vocab, vocab}, 0, vocab * vocab}, {"bigram.bias", {vocab}, bias_at, vocab}};
    flat_ = bias_at + vocab;
    params_ = backend.zeros(engine::Shape{flat_}, engine::DType::kF32);
    grads_ = backend.zeros(engine::Shape{flat_}, engine::DType::kF32);
    uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
    float* p = params_.f32();
    for (int64_t i = 0; i < vocab * vocab; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      p[i] = static_cast<float>(static_cast<double>(x >> 40) / double(1 << 24) - 0.5);
    }
    weights_ = params_;
    if (weight_dtype != engine::DType::kF32) {
      weights_ = backend.zeros(engine::Shape{flat_}, weight_dtype);
      backend.convert(weights_, params_);
    }
  }

  engine::Backend& backend() override { return backend_; }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t flat_size() const override { return flat_; }
  const engine::Tensor& params_flat() override { return params_; }
  const engine::Tensor& weights_flat() override { return weights_; }
  void release_master() override {
    if (weights_.data() != params_.data()) params_ = engine::Tensor();
  }
  bool has_grads() const override { return grads_.defined(); }
  const engine::Tensor& grads_flat() override {
    RLRUN_CHECK(grads_.defined(), "grads released");
    return grads_;
  }
  void zero_grads() override { backend_.fill_zero(grads_); }
  void release_grads() override { grads_ = engine::Tensor(); }
  void restore_grads() override {
    if (!grads_.defined()) grads_ = backend_.zeros(engine::Shape{flat_}, engine::DType::kF32);
  }

  Result<ModelForward> forward(const MicroBatch& mb, bool for_backward) override {
    const int64_t n = mb.num_tokens();
    for (int32_t id : mb.input_ids) {
      if (id < 0 || id >= vocab_) return invalid_argument("bigram test double: id out of range");
    }
    std::vector<float> lp(n), ent(n), probs(n * vocab_);
    // One logits row at a time (bf16 weights are widened per row, never as a whole).
    std::vector<float> row(vocab_), bias(vocab_);
    read_weights(specs_[1].offset, bias.data());
    for (int64_t t = 0; t < n; ++t) {
      read_weights(mb.input_ids[t] * vocab_, row.data());
      double mx = -1e30, z = 0;
      for (int64_t v = 0; v < vocab_; ++v) mx = std::max(mx, double(row[v] + bias[v]));
      for (int64_t v = 0; v < vocab_; ++v) z += std::exp(double(row[v] + bias[v]) - mx);
      double h = 0;
      for (int64_t v = 0; v < vocab_; ++v) {
        const double logp = double(row[v] + bias[v]) - mx - std::log(z);
        probs[t * vocab_ + v] = static_cast<float>(std::exp(logp));
        h -= std::exp(logp) * logp;
      }
      ent[t] = static_cast<float>(h);
      lp[t] = mb.targets[t] >= 0 ? std::log(probs[t * vocab_ + mb.targets[t]]) : 0.0f;
    }
    if (for_backward) {
      saved_ids_ = mb.input_ids;
      saved_targets_ = mb.targets;
      saved_probs_ = probs;
      saved_entropy_ = ent;
    }
    ModelForward out;
    out.logprobs = engine::from_host(backend_, engine::Shape{n}, lp);
    out.entropy = engine::from_host(backend_, engine::Shape{n}, ent);
    return out;
  }

  void backward(const engine::Tensor& dlogprob, const engine::Tensor& dentropy) override {
    const int64_t n = static_cast<int64_t>(saved_ids_.size());
    const float* dlp = dlogprob.f32();
    const float* dh = dentropy.defined() ? dentropy.f32() : nullptr;
    float* gtable = grads_.f32();
    float* gbias = grads_.f32() + specs_[1].offset;
    for (int64_t t = 0; t < n; ++t) {
      const float* p = &saved_probs_[t * vocab_];
      for (int64_t v = 0; v < vocab_; ++v) {
        double d = 0;
        if (saved_targets_[t] >= 0) d += dlp[t] * ((v == saved_targets_[t] ? 1.0 : 0.0) - p[v]);
        if (dh != nullptr && p[v] > 0) d += dh[t] * (-p[v] * (std::log(double(p[v])) + saved_entropy_[t]));
        gtable[saved_ids_[t] * vocab_ + v] += static_cast<float>(d);
        gbias[v] += static_cast<float>(d);
      }
    }
    saved_ids_.clear();
  }


 private:
  // weights [at, at + V) as floats
  void read_weights(int64_t at, float* out) const {
    if (weights_.dtype() == engine::DType::kF32) {
      std::copy(weights_.f32() + at, weights_.f32() + at + vocab_, out);
      return;
    }
    for (int64_t v = 0; v < vocab_; ++v) out[v] = engine::bf16_to_f32(weights_.bf16()[at + v]);
  }

  engine::Backend& backend_;
  int64_t vocab_;
  int64_t flat_ = 0;
  std::vector<ParamSpec> specs_;
  engine::Tensor params_, weights_, grads_;  // weights_ IS params_ unless bf16
  std::vector<int32_t> saved_ids_, saved_targets_;
  std::vector<float> saved_probs_, saved_entropy_;
};

}  // namespace rlrun::trainer::testing
