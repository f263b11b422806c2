// Parameter layout, deterministic initialisation and the releasable grad buffer.
#include "engine/model/weights.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/engine/model/model_test_util.h"

namespace rlrun::engine {
namespace {

TEST(ModelWeights, LayoutHasHfNamesAlignedOffsetsAndTheConfigsParameterCount) {
  for (bool qwen2 : {false, true}) {
    const ModelConfig c = testing::tiny_config(qwen2);
    const auto layout = parameter_layout(c);
    int64_t total = 0, end = 0;
    for (const ParamInfo& p : layout) {
      EXPECT_EQ(p.offset % kParamAlign, 0) << p.name;
      EXPECT_GE(p.offset, end) << p.name << " overlaps the previous tensor";
      EXPECT_EQ(p.numel, p.shape.numel());
      end = p.offset + p.numel;
      total += p.numel;
    }
    EXPECT_EQ(total, c.num_parameters());
    EXPECT_EQ(layout.front().name, "model.embed_tokens.weight");
    EXPECT_EQ(layout[1].name, "model.layers.0.input_layernorm.weight");
    EXPECT_EQ(layout[2].name, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(layout[2].shape, Shape({32, 32}));
    EXPECT_EQ(layout.back().name, qwen2 ? "model.norm.weight" : "lm_head.weight");
    auto backend = testing::cpu_backend();
    ModelWeights w(*backend, c);
    ASSERT_TRUE(w.index_of("model.layers.1.self_attn.k_proj.weight").ok());
    EXPECT_EQ(w.params()[*w.index_of("model.layers.1.self_attn.k_proj.weight")].shape, Shape({16, 32}));  // 2 kv heads x 8
    EXPECT_EQ(w.index_of("model.layers.0.self_attn.q_proj.bias").ok(), qwen2);
    EXPECT_EQ(w.index_of("model.layers.2.mlp.up_proj.weight").status().code(), StatusCode::kNotFound);
  }
}

// (e) The same seed gives the same weights; another seed others; norms are 1, biases 0, and the
// matrices have the requested spread. A tensor's values depend only on (seed, name, shape).
TEST(ModelWeights, InitIsDeterministicFromTheSeed) {
  auto backend = testing::cpu_backend();
  const ModelConfig c = testing::tiny_config(true);
  ModelWeights a(*backend, c), b(*backend, c), other(*backend, c);
  a.init_random(42, 0.02f);
  b.init_random(42, 0.02f);
  other.init_random(43, 0.02f);
  const auto va = to_host_f32(a.master_flat()), vb = to_host_f32(b.master_flat()), vo = to_host_f32(other.master_flat());
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vo);
  for (size_t i = 0; i < a.params().size(); ++i) {
    const ParamInfo& p = a.params()[i];
    const auto t = to_host_f32(a.master(i));
    if (p.is_norm || p.is_bias) {
      for (float x : t) ASSERT_EQ(x, p.is_norm ? 1.0f : 0.0f) << p.name;
      continue;
    }
    double sum = 0.0, sq = 0.0;
    for (float x : t) {
      sum += x;
      sq += double{x} * x;
    }
    const double n = static_cast<double>(t.size()), mean = sum / n, std = std::sqrt(sq / n - mean * mean);
    // Five standard errors of each estimate.
    EXPECT_NEAR(std, 0.02, 5 * 0.02 / std::sqrt(2 * n)) << p.name;
    EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(n)) << p.name;
  }
  // Same name and shape in a model of another depth: same values.
  ModelConfig deeper = c;
  deeper.num_layers = 3;
  ModelWeights d(*backend, deeper);
  d.init_random(42, 0.02f);
  EXPECT_EQ(to_host_f32(d.master(*d.index_of("model.layers.1.mlp.down_proj.weight"))),
            to_host_f32(a.master(*a.index_of("model.layers.1.mlp.down_proj.weight"))));
  // Padding between tensors stays zero.
  const ParamInfo& first = a.params()[0];
  for (int64_t e = first.offset + first.numel; e < a.params()[1].offset; ++e) EXPECT_EQ(va[e], 0.0f);
}

TEST(ModelWeights, GradBufferCanBeReleasedAndRestoredZeroed) {
  auto backend = testing::cpu_backend();
  ModelWeights w(*backend, testing::tiny_config(false));
  const size_t bytes = static_cast<size_t>(w.flat_size()) * 4;
  std::vector<float> ones(w.flat_size(), 1.0f);
  backend->copy_from_host(w.grad_flat(), ones.data(), bytes);
  const size_t before = backend->bytes_in_use();
  w.release_grads();
  EXPECT_FALSE(w.has_grads());
  EXPECT_EQ(backend->bytes_in_use(), before - bytes);
  w.restore_grads();
  EXPECT_EQ(backend->bytes_in_use(), before);
  for (float x : to_host_f32(w.grad_flat())) ASSERT_EQ(x, 0.0f);
  // Views bound after restore point into the new buffer.
  std::vector<float> g(w.grad_final_norm().numel(), 2.0f);
  backend->copy_from_host(w.grad_final_norm(), g.data(), g.size() * 4);
  EXPECT_EQ(to_host_f32(w.grad(*w.index_of("model.norm.weight"))), g);
}

}  // namespace
}  // namespace rlrun::engine
