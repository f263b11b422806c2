// base_weights_dtype: bf16 (ModelWeights' kBf16Frozen): the weight matrices stored in bf16 only,
// norms and biases in f32, no master and no gradients; a model over them (with LoRA adapters)
// computes log-probs and adapter gradients close to the fp32 model's, and holds half the bytes.
// compute_dtype: bf16's kBf16Cache (an f32 master and gradients, and a bf16 copy of the matrices
// refreshed by sync_compute) computes exactly what rounding the weights at every product does.
// Guarded by the CPU feature: the products need native bf16 (AVX512_BF16 or AMX).
#include <gtest/gtest.h>

#include <random>

#include "engine/bf16.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/io/model_io.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "tests/engine/model/model_test_util.h"

namespace rlrun::engine {
namespace {

#define SKIP_WITHOUT_NATIVE_BF16()                                                                  \
  if (!cpu::bf16_gemm_native())                                                                     \
  GTEST_SKIP() << "this CPU has no native bf16 products (AVX512_BF16 or AMX): "                     \
               << cpu::cpu_features().flags()

// The fp32 tiny model's weights, loaded into a model of `storage` (the loader's path).
std::unique_ptr<Model> copy_of(Backend& b, const Model& from, WeightStorage storage) {
  ModelOptions o;
  o.weight_storage = storage;
  auto m = Model::create(b, from.config(), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  const std::vector<HostTensor> tensors = weights_to_host(from);
  EXPECT_TRUE(load_weights(**m, tensors).ok());
  return std::move(m).value();
}

// Adapters on every projection, A and B random (B = 0 would leave the adapters out of the forward).
std::unique_ptr<LoraWeights> random_lora(Backend& b, const ModelConfig& c) {
  LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 8.0;
  auto w = LoraWeights::create(b, c, lc);
  EXPECT_TRUE(w.ok());
  std::vector<float> flat(static_cast<size_t>((*w)->flat_size()));
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (float& x : flat) x = nd(rng);
  b.copy_from_host((*w)->master_flat(), flat.data(), flat.size() * sizeof(float));
  return std::move(w).value();
}

testing::HostBatch batch_of(uint32_t seed) {
  std::mt19937 rng(seed);
  testing::HostBatch hb;
  for (size_t len : {9, 6, 17}) {
    const auto t = testing::random_ids(rng, len, 64);
    hb.add_sequence(t, testing::shifted_targets(t));
  }
  return hb;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

class Bf16Weights : public ::testing::TestWithParam<bool> {};  // param: qwen2 variant (biases, tied)

TEST_P(Bf16Weights, MatricesAreBf16NormsAndBiasesF32WithoutMasterOrGradients) {
  auto backend = testing::cpu_backend();
  auto fp32 = testing::tiny_model(*backend, GetParam());
  const size_t before = backend->bytes_in_use();
  auto frozen = copy_of(*backend, *fp32, WeightStorage::kBf16Frozen);
  const size_t frozen_allocated = backend->bytes_in_use() - before;
  const ModelWeights& w = frozen->weights();
  EXPECT_EQ(w.storage(), WeightStorage::kBf16Frozen);
  EXPECT_FALSE(w.has_master());
  EXPECT_FALSE(w.has_grads());
  EXPECT_EQ(w.embed_tokens().dtype(), DType::kBF16);
  EXPECT_EQ(w.lm_head().dtype(), DType::kBF16);
  EXPECT_EQ(w.final_norm().dtype(), DType::kF32);
  for (int64_t l = 0; l < w.config().num_layers; ++l) {
    const LayerWeights& lw = w.layer(l);
    for (const Tensor* m : {&lw.q, &lw.k, &lw.v, &lw.o, &lw.gate, &lw.up, &lw.down}) EXPECT_EQ(m->dtype(), DType::kBF16);
    for (const Tensor* n : {&lw.input_norm, &lw.post_norm}) EXPECT_EQ(n->dtype(), DType::kF32);
    if (GetParam()) {
      EXPECT_EQ(lw.q_bias.dtype(), DType::kF32);
    }
  }
  // The values: matrices rounded once to bf16, norms and biases exact.
  for (size_t i = 0; i < w.params().size(); ++i) {
    const ParamInfo& p = w.params()[i];
    const std::vector<float> want = to_host_f32(fp32->weights().master(i)), got = to_host_f32(w.compute(i));
    for (size_t e = 0; e < want.size(); ++e) {
      const float rounded = (p.is_norm || p.is_bias) ? want[e] : bf16_to_f32(f32_to_bf16(want[e]));
      ASSERT_EQ(got[e], rounded) << p.name << "[" << e << "]";
    }
  }
  // Memory: 2 bytes per element of the flat layout plus the norms and biases in f32 (each at an
  // aligned offset), what the backend allocated; against 4 + 4 of an fp32 master and its
  // gradients (what a rollout worker used to hold) and 4 of the master alone.
  int64_t small = 0;
  for (const ParamInfo& q : w.params())
    if (q.is_norm || q.is_bias) small += (q.numel + kParamAlign - 1) / kParamAlign * kParamAlign;
  const int64_t p = w.flat_size();
  EXPECT_EQ(w.bytes(), 2 * p + 4 * small);
  EXPECT_NEAR(double(frozen_allocated), double(w.bytes()), 2 * 256.0) << "bytes() is what was allocated";
  EXPECT_EQ(fp32->weights().bytes(), 8 * p);  // f32 master + grad
  fp32->weights().release_grads();
  EXPECT_EQ(fp32->weights().bytes(), 4 * p);
  EXPECT_LT(double(w.bytes()), 0.55 * double(fp32->weights().bytes())) << "the tiny model's norms weigh ~4%";
}

// A LoRA run over a bf16 base: forward + backward give log-probs and adapter gradients within
// bf16 rounding of the fp32 base's, on the training pass and the KV-cache pass alike.
TEST_P(Bf16Weights, LoraLogprobsAndAdapterGradientsAreCloseToTheFp32Base) {
  SKIP_WITHOUT_NATIVE_BF16();
  auto backend = testing::cpu_backend();
  auto fp32 = testing::tiny_model(*backend, GetParam(), 3, 0.3f);
  fp32->weights().release_grads();
  auto frozen = copy_of(*backend, *fp32, WeightStorage::kBf16Frozen);
  auto lora32 = random_lora(*backend, fp32->config()), lora16 = random_lora(*backend, fp32->config());
  ASSERT_TRUE(fp32->attach_lora(lora32.get()).ok());
  ASSERT_TRUE(frozen->attach_lora(lora16.get()).ok());
  const testing::HostBatch hb = batch_of(5);
  std::vector<float> logprobs[2], grads[2];
  int i = 0;
  for (auto [model, lora] : {std::pair{fp32.get(), lora32.get()}, std::pair{frozen.get(), lora16.get()}}) {
    auto out = model->forward(hb.batch(), false);
    ASSERT_TRUE(out.ok());
    logprobs[i] = to_host_f32(out->logprobs);
    lora->zero_grads();
    ASSERT_TRUE(mean_nll_backward(*model, hb.batch()).ok());
    grads[i++] = to_host_f32(lora->grad_flat());
  }
  double worst_lp = 0, sum_lp = 0, worst_grad = 0;
  for (size_t t = 0; t < logprobs[0].size(); ++t) {
    const double d = std::fabs(logprobs[1][t] - logprobs[0][t]);
    worst_lp = std::max(worst_lp, d);
    sum_lp += d;
  }
  for (size_t g = 0; g < grads[0].size(); ++g) worst_grad = std::max(worst_grad, double(std::fabs(grads[1][g] - grads[0][g])));
  // bf16 keeps 8 significant bits: the real 0.5B model drifts ~0.03 nats a token on average, this
  // tiny one (weights of std 0.3, sharp logits) up to ~0.1 at worst.
  EXPECT_LT(worst_lp, 0.2) << "log-probs drifted past bf16 rounding";
  EXPECT_LT(sum_lp / double(logprobs[0].size()), 0.04) << "mean log-prob drift";
  EXPECT_GT(worst_lp, 1e-6) << "the bf16 base computed exactly the fp32 one: were its weights rounded?";
  EXPECT_LT(worst_grad, 0.03 * max_abs(grads[0])) << "adapter gradients, largest " << max_abs(grads[0]);
  EXPECT_FALSE(frozen->weights().has_grads());

  // Inference over the KV cache reads the same bf16 weights (few rows: one token).
  auto prefill_then_decode = [&](Model& m) {
    auto cache = KvCache::create(*backend, KvCacheConfig::for_model(m.config(), 4, 8));
    EXPECT_TRUE(cache.ok());
    const std::vector<int32_t> toks = {3, 9, 27, 1, 44};
    const SeqId seq = 1;
    EXPECT_TRUE((*cache)->add_sequence(seq).ok());
    const std::vector<int32_t> cu = {0, 5};
    EXPECT_TRUE(m.forward_cached(**cache, std::span<const SeqId>(&seq, 1), toks, cu).ok());
    const std::vector<int32_t> next = {7};
    auto logits = m.decode(**cache, std::span<const SeqId>(&seq, 1), next);
    EXPECT_TRUE(logits.ok());
    return to_host_f32(*logits);
  };
  const std::vector<float> want = prefill_then_decode(*fp32), got = prefill_then_decode(*frozen);
  double worst = 0;
  for (size_t v = 0; v < want.size(); ++v) worst = std::max(worst, double(std::fabs(got[v] - want[v])));
  EXPECT_LT(worst, 0.05 * (1 + max_abs(want))) << "decode logits";
}

// compute_dtype: bf16 on a CPU (kBf16Cache): the matrices' bf16 copy, made once per write of the
// master, gives bit for bit the log-probs and gradients of rounding the f32 weights at every product
// (rows past the few-row kernels' bound, where both take the bf16 path), and follows the master
// only through sync_compute().
TEST_P(Bf16Weights, ACachedBf16CopyComputesWhatRoundingAtEveryProductDoes) {
  SKIP_WITHOUT_NATIVE_BF16();
  auto backend = testing::cpu_backend();
  ASSERT_TRUE(backend->set_matmul_bf16(true));
  auto per_product = testing::tiny_model(*backend, GetParam(), 3, 0.3f);
  auto cached = copy_of(*backend, *per_product, WeightStorage::kBf16Cache);
  const ModelWeights& w = cached->weights();
  ASSERT_TRUE(w.has_master());
  ASSERT_TRUE(w.has_grads());
  EXPECT_EQ(w.layer(0).q.dtype(), DType::kBF16);
  EXPECT_EQ(w.lm_head().dtype(), DType::kBF16);
  EXPECT_EQ(w.embed_tokens().dtype(), DType::kF32) << "rows are gathered from the master";
  EXPECT_EQ(w.final_norm().dtype(), DType::kF32);
  EXPECT_EQ(w.bytes(), 4 * w.flat_size() + 4 * w.flat_size() + 2 * w.flat_size()) << "master + grad + bf16 copy";
  // The export is the model as it computes: matrices as the bf16 copy, norms and biases exact.
  for (const HostTensor& t : weights_to_host(*cached)) {
    const size_t i = w.index_of(t.name).value();
    const ParamInfo& p = w.params()[i];
    const std::vector<float> master = to_host_f32(per_product->weights().master(i));
    for (size_t e = 0; e < master.size(); ++e) {
      const float want = (p.is_norm || p.is_bias) ? master[e] : bf16_to_f32(f32_to_bf16(master[e]));
      ASSERT_EQ(t.data[e], want) << t.name << "[" << e << "]";
    }
  }
  // Sequences of 150 tokens: every product has more rows than the few-row kernels take.
  std::mt19937 rng(11);
  testing::HostBatch hb;
  for (size_t len : {150, 170}) {
    const auto t = testing::random_ids(rng, len, 64);
    hb.add_sequence(t, testing::shifted_targets(t));
  }
  auto logprobs_and_grads = [&](Model& m) {
    auto out = m.forward(hb.batch(), false);
    EXPECT_TRUE(out.ok());
    m.weights().zero_grads();
    EXPECT_TRUE(mean_nll_backward(m, hb.batch()).ok());
    return std::pair{to_host_f32(out->logprobs), to_host_f32(m.weights().grad_flat())};
  };
  const auto want = logprobs_and_grads(*per_product);
  const auto got = logprobs_and_grads(*cached);
  EXPECT_EQ(got.first, want.first) << "log-probs";
  EXPECT_EQ(got.second, want.second) << "gradients";

  // An update of the master (what the optimizer writes), then sync_compute(): equal again.
  std::vector<float> master = to_host_f32(per_product->weights().master_flat());
  for (size_t e = 0; e < master.size(); ++e) master[e] -= 0.05f * want.second[e];
  for (Model* m : {per_product.get(), cached.get()}) {
    backend->copy_from_host(m->weights().master_flat(), master.data(), master.size() * sizeof(float));
    m->weights().sync_compute();
  }
  const auto want2 = logprobs_and_grads(*per_product);
  EXPECT_EQ(logprobs_and_grads(*cached).first, want2.first) << "after an update and sync_compute()";
  EXPECT_NE(want2.first, want.first) << "the update changed the model";
  // A projection's master moved without sync_compute(): the products still read the old copy
  // (what the trainer's weights_written() exists for); with it they read the new one.
  const size_t down = w.index_of("model.layers.0.mlp.down_proj.weight").value();
  const ParamInfo& p = w.params()[down];
  for (int64_t e = 0; e < p.numel; ++e) master[p.offset + e] += 0.5f;
  backend->copy_from_host(cached->weights().master_flat(), master.data(), master.size() * sizeof(float));
  EXPECT_EQ(logprobs_and_grads(*cached).first, want2.first) << "the bf16 copy moved without sync_compute()";
  cached->weights().sync_compute();
  EXPECT_NE(logprobs_and_grads(*cached).first, want2.first) << "sync_compute() did not refresh the copy";
}

INSTANTIATE_TEST_SUITE_P(Variants, Bf16Weights, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "qwen2" : "llama"; });

// A weight sync's buckets (write_flat), cut anywhere, land rounded in the matrices and exact in
// the norms.
TEST(Bf16WeightsChecks, WriteFlatRoundsTheMatricesAndKeepsTheNormsExact) {
  auto backend = testing::cpu_backend();
  auto fp32 = testing::tiny_model(*backend, true);
  ModelOptions o;
  o.weight_storage = WeightStorage::kBf16Frozen;
  auto frozen = Model::create(*backend, fp32->config(), o);
  ASSERT_TRUE(frozen.ok());
  ModelWeights& w = (*frozen)->weights();
  const std::vector<float> flat = to_host_f32(fp32->weights().master_flat());
  const int64_t bucket = 1000;  // not a multiple of any tensor: buckets cut tensors in the middle
  for (int64_t begin = 0; begin < w.flat_size(); begin += bucket) {
    const int64_t n = std::min(bucket, w.flat_size() - begin);
    const Tensor t = backend->zeros({n}, DType::kF32);
    backend->copy_from_host(t, flat.data() + begin, n * sizeof(float));
    w.write_flat(begin, t);
  }
  for (size_t i = 0; i < w.params().size(); ++i) {
    const ParamInfo& p = w.params()[i];
    const std::vector<float> got = to_host_f32(w.compute(i));
    for (int64_t e = 0; e < p.numel; ++e) {
      const float v = flat[p.offset + e];
      ASSERT_EQ(got[e], (p.is_norm || p.is_bias) ? v : bf16_to_f32(f32_to_bf16(v))) << p.name << "[" << e << "]";
    }
  }
  EXPECT_FALSE(w.has_master());
  EXPECT_FALSE(w.has_grads());
}

}  // namespace
}  // namespace rlrun::engine
