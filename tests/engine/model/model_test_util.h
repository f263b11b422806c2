// model_test_util.h - a tiny decoder and packed batches for the model tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"

namespace rlrun::engine::testing {

// hidden 32, 2 layers, 4 heads, 2 kv heads (GQA), vocab 64. `qwen2` adds q/k/v biases and ties
// the embeddings, so both variants cover every parameter kind.
inline ModelConfig tiny_config(bool qwen2) {
  ModelConfig c;
  c.architecture = qwen2 ? "qwen2" : "llama";
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 48;
  c.vocab_size = 64;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.qkv_bias = qwen2;
  c.tie_embeddings = qwen2;
  return c;
}

// One thread: the tiny model gains nothing from more, and on shared CI cores the spinning of
// several OpenMP/OpenBLAS pools costs seconds per test (threading is the op tests' subject).
// Uninitialized buffers are poisoned: a model op that reads one before writing it turns its
// results to NaN, and the comparisons fail.
inline std::unique_ptr<Backend> cpu_backend() {
  auto b = create_backend("cpu", 1);
  EXPECT_TRUE(b.ok());
  if (auto* cpu = dynamic_cast<cpu::CpuBackend*>(b.value().get())) cpu->set_poison_uninitialized(true);
  return std::move(b).value();
}

inline std::unique_ptr<Model> tiny_model(Backend& backend, bool qwen2, uint64_t seed = 1, float std = 0.2f,
                                         ModelOptions options = {}) {
  auto m = Model::create(backend, tiny_config(qwen2), options);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  std::unique_ptr<Model> model = std::move(m).value();
  model->weights().init_random(seed, std);
  if (qwen2) {  // random biases too, so their gradients are exercised with nonzero values
    for (size_t i = 0; i < model->weights().params().size(); ++i) {
      const ParamInfo& p = model->weights().params()[i];
      if (!p.is_bias) continue;
      std::mt19937 rng(static_cast<uint32_t>(i));
      std::normal_distribution<float> nd(0.0f, 0.1f);
      std::vector<float> v(p.numel);
      for (float& x : v) x = nd(rng);
      backend.copy_from_host(model->weights().master(i), v.data(), v.size() * sizeof(float));
    }
    model->weights().sync_compute();
  }
  return model;
}

// Host-side storage of a packed batch; batch() gives the spans.
struct HostBatch {
  std::vector<int32_t> tokens, positions, cu_seqlens{0}, targets, prefix_of;
  // A segment of its own; returns its index.
  int32_t add_sequence(const std::vector<int32_t>& toks, const std::vector<int32_t>& tgts) {
    return add_segment(toks, tgts, 0, -1);
  }
  // A segment continuing segment `prefix` (PackedBatch::prefix_of; itself perhaps a continuation),
  // its positions going on from the prefix's; returns its index.
  int32_t add_continuation(int32_t prefix, const std::vector<int32_t>& toks, const std::vector<int32_t>& tgts) {
    return add_segment(toks, tgts, positions[cu_seqlens[prefix + 1] - 1] + 1, prefix);
  }
  PackedBatch batch() const { return {tokens, positions, cu_seqlens, targets, prefix_of}; }

 private:
  int32_t add_segment(const std::vector<int32_t>& toks, const std::vector<int32_t>& tgts, int32_t first_position,
                      int32_t prefix) {
    for (size_t i = 0; i < toks.size(); ++i) {
      tokens.push_back(toks[i]);
      positions.push_back(first_position + static_cast<int32_t>(i));
      targets.push_back(tgts[i]);
    }
    cu_seqlens.push_back(static_cast<int32_t>(tokens.size()));
    prefix_of.push_back(prefix);
    return static_cast<int32_t>(prefix_of.size()) - 1;
  }
};

inline std::vector<int32_t> random_ids(std::mt19937& rng, size_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = d(rng);
  return v;
}

// Next-token targets of `toks` with the last one masked (-1), like the trainer's shift.
inline std::vector<int32_t> shifted_targets(const std::vector<int32_t>& toks) {
  std::vector<int32_t> t(toks.begin() + 1, toks.end());
  t.push_back(-1);
  return t;
}

inline void expect_near_all(const std::vector<float>& a, const std::vector<float>& b, float tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float worst = 0.0f;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float err = std::fabs(a[i] - b[i]) / (1.0f + std::fabs(b[i]));
    if (std::isnan(err) || err > worst) {
      worst = std::isnan(err) ? INFINITY : err;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst relative error at " << at << ": " << a[at] << " vs " << b[at];
}

}  // namespace rlrun::engine::testing
