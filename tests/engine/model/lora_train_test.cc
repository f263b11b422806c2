// LoRA in the decoder's training and inference passes: the adapted model computes what the
// merged model W + (alpha / r) B A computes, adapter gradients match finite differences, the base
// stays frozen (no base gradient buffer needed), and adapters switched off give the base model.
#include <gtest/gtest.h>

#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "tests/engine/model/model_test_util.h"

namespace rlrun::engine {
namespace {

using testing::HostBatch;

// Adapters on every projection with A and B both random (B = 0 would hide half the math).
std::unique_ptr<LoraWeights> random_lora(Backend& b, const ModelConfig& c, int64_t rank, const char* targets = "all") {
  LoraConfig lc;
  lc.rank = rank;
  lc.alpha = 3.0;
  lc.targets = *parse_lora_targets(targets);
  auto w = LoraWeights::create(b, c, lc);
  EXPECT_TRUE(w.ok()) << w.status().message();
  (*w)->init(5);
  std::vector<float> flat = to_host_f32((*w)->master_flat());
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (const ParamInfo& p : (*w)->params())
    if (p.name.find(".lora_B.") != std::string::npos)
      for (int64_t i = 0; i < p.numel; ++i) flat[p.offset + i] = nd(rng);
  b.copy_from_host((*w)->master_flat(), flat.data(), flat.size() * sizeof(float));
  return std::move(w).value();
}

HostBatch two_sequences(uint32_t seed) {
  std::mt19937 rng(seed);
  HostBatch hb;
  for (size_t len : {7, 5}) {
    const auto t = testing::random_ids(rng, len, 64);
    hb.add_sequence(t, testing::shifted_targets(t));
  }
  return hb;
}

class LoraTrain : public ::testing::TestWithParam<bool> {};  // param: qwen2 variant (biases, tied)

TEST_P(LoraTrain, AdaptedModelEqualsTheMergedModel) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  auto merged = testing::tiny_model(*backend, GetParam());
  auto lora = random_lora(*backend, model->config(), 4);
  ASSERT_TRUE(model->attach_lora(lora.get()).ok());
  merge_lora(*lora, merged->weights());
  const HostBatch hb = two_sequences(3);
  auto a = model->forward(hb.batch(), false);
  auto m = merged->forward(hb.batch(), false);
  ASSERT_TRUE(a.ok() && m.ok());
  testing::expect_near_all(to_host_f32(a->logprobs), to_host_f32(m->logprobs), 2e-5f, "logprobs");
  testing::expect_near_all(to_host_f32(a->entropy), to_host_f32(m->entropy), 2e-5f, "entropy");

  // Inference over the KV cache adds the adapters too: prefill logits equal the merged model's.
  auto cache_logits = [&](Model& mdl) {
    auto cache = KvCache::create(*backend, KvCacheConfig::for_model(mdl.config(), 4, 8));
    EXPECT_TRUE(cache.ok());
    const std::vector<int32_t> toks = {3, 9, 27, 1, 44};
    const SeqId seq = 1;
    EXPECT_TRUE((*cache)->add_sequence(seq).ok());
    const std::vector<int32_t> cu = {0, 5};
    auto logits = mdl.forward_cached(**cache, std::span<const SeqId>(&seq, 1), toks, cu);
    EXPECT_TRUE(logits.ok());
    return to_host_f32(*logits);
  };
  testing::expect_near_all(cache_logits(*model), cache_logits(*merged), 2e-5f, "prefill logits");

  model->set_lora_enabled(false);  // the base model: the KL reference without a copy
  auto base = model->forward(hb.batch(), false);
  auto plain = testing::tiny_model(*backend, GetParam())->forward(hb.batch(), false);
  ASSERT_TRUE(base.ok() && plain.ok());
  testing::expect_near_all(to_host_f32(base->logprobs), to_host_f32(plain->logprobs), 0.0f, "adapters off");
}

// The base is frozen: its grad buffer can be released, and backward fills only the adapters'.
// Their gradients match central differences of the mean NLL, with and without checkpointing.
TEST_P(LoraTrain, AdapterGradientsMatchFiniteDifferencesWithTheBaseFrozen) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam(), 11, 0.3f);
  model->weights().release_grads();
  auto lora = random_lora(*backend, model->config(), 3);
  ASSERT_TRUE(model->attach_lora(lora.get()).ok());
  const HostBatch hb = two_sequences(9);
  lora->zero_grads();
  ASSERT_TRUE(mean_nll_backward(*model, hb.batch()).ok());
  const std::vector<float> grads = to_host_f32(lora->grad_flat());
  EXPECT_FALSE(model->weights().has_grads());

  model->set_gradient_checkpointing(true);
  lora->zero_grads();
  ASSERT_TRUE(mean_nll_backward(*model, hb.batch()).ok());
  testing::expect_near_all(to_host_f32(lora->grad_flat()), grads, 1e-6f, "checkpointed grads");

  std::vector<float> master = to_host_f32(lora->master_flat());
  const double eps = 3e-3;
  int checked = 0;
  for (const ParamInfo& p : lora->params()) {
    if (p.name.find("layers.1.") != std::string::npos) continue;  // layer 0 covers every target
    for (int64_t e : {int64_t{0}, p.numel / 2 + 1, p.numel - 1}) {
      const size_t at = static_cast<size_t>(p.offset + e);
      const float saved = master[at];
      auto loss_at = [&](double delta) {
        master[at] = static_cast<float>(saved + delta);
        backend->copy_from_host(lora->master_flat(), master.data(), master.size() * sizeof(float));
        auto l = mean_nll(*model, hb.batch());
        EXPECT_TRUE(l.ok());
        return *l;
      };
      const double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
      master[at] = saved;
      EXPECT_NEAR(grads[at], fd, 3e-4 + 2e-2 * std::fabs(fd)) << p.name << "[" << e << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 7 * 2 * 3);
  double norm = 0;
  for (float g : grads) norm += g * g;
  EXPECT_GT(norm, 1e-6);
}

// Targets left out get no adapter and change nothing; attaching checks the dtype and shapes.
TEST(LoraTrainChecks, OnlyTheTargetsAreAdaptedAndMismatchesAreRefused) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, false);
  auto merged = testing::tiny_model(*backend, false);
  auto lora = random_lora(*backend, model->config(), 2, "v_proj,down_proj");
  ASSERT_TRUE(model->attach_lora(lora.get()).ok());
  merge_lora(*lora, merged->weights());
  const HostBatch hb = two_sequences(4);
  auto a = model->forward(hb.batch(), false);
  auto m = merged->forward(hb.batch(), false);
  ASSERT_TRUE(a.ok() && m.ok());
  testing::expect_near_all(to_host_f32(a->logprobs), to_host_f32(m->logprobs), 2e-5f, "logprobs");

  ModelConfig other = model->config();
  other.intermediate_size = 40;
  auto wrong = random_lora(*backend, other, 2);
  EXPECT_FALSE(model->attach_lora(wrong.get()).ok());
  ASSERT_TRUE(model->attach_lora(nullptr).ok());
  EXPECT_EQ(model->lora(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Variants, LoraTrain, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "qwen2" : "llama"; });

}  // namespace
}  // namespace rlrun::engine
