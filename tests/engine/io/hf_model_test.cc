// The whole model against HF transformers: the fixture `hf_reference_setup` writes tiny random
// Llama (untied, tied) and Qwen2 models with their logits, next-token log-probs, loss, every
// parameter gradient and the parameters after three torch.optim.AdamW steps
// (tests/reference/hf_reference.py). Here rlrun loads each checkpoint (engine/io/model_io.h) and must
// reproduce all of it, in fp32 on the CPU backend.
//
// Tolerances (fp32 on both sides; differences come from summation order only):
//   log-probs, log-softmax rows, entropies, logits, loss: |a - b| / (1 + |b|) <= 1e-5
//   gradients: max |a - b| over a tensor <= 1e-4 * max |b| of that tensor (+ 1e-7)
//   parameters after 3 AdamW steps: |a - b| <= 5e-5 where the step-1 gradient is above round-off,
//   else <= 2 * lr * steps (see ThreeAdamWStepsMatchTorch: Adam normalises each element's update
//   by its own gradient RMS, which amplifies round-off where a gradient is or passes near 0;
//   measured largest 1.3e-5)
// Each check prints its largest difference, so drift shows before it fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/io/model_io.h"
#include "engine/model/model.h"
#include "tests/engine/io/hf_reference.h"

namespace rlrun::engine {
namespace {

constexpr double kLogprobTol = 1e-5;
constexpr double kGradTol = 1e-4;
constexpr double kAdamTol = 5e-5;  // 0.17% of the lr * steps = 0.03 an element can move
// |grad| <= this times its tensor's max |grad| counts as round-off for the AdamW comparison
constexpr double kAdamGradFloor = 1e-4;

struct Diff {
  double max_abs = 0, max_rel = 0, ref_scale = 0;  // rel: |a - b| / (1 + |b|); scale: max |b|
  size_t at = 0;
};

Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  Diff d;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double abs = std::fabs(double{got[i]} - want[i]);
    const double rel = std::isnan(abs) ? INFINITY : abs / (1.0 + std::fabs(want[i]));
    if (rel > d.max_rel) d.at = i;
    d.max_abs = std::max(d.max_abs, std::isnan(abs) ? INFINITY : abs);
    d.max_rel = std::max(d.max_rel, rel);
    d.ref_scale = std::max(d.ref_scale, std::fabs(double{want[i]}));
  }
  return d;
}

void report(const std::string& what, const Diff& d) {
  std::printf("[hf_model] %-48s max abs diff %.3g  max rel diff %.3g  (ref max |x| %.3g)\n", what.c_str(),
              d.max_abs, d.max_rel, d.ref_scale);
}

struct HostBatch {
  std::vector<int32_t> tokens, positions, cu_seqlens{0}, targets;
  // `targets` empty: the next token of `ids` (last one masked); else one target per token.
  void add(const std::vector<int32_t>& ids, const std::vector<int32_t>& tgts = {}) {
    for (size_t t = 0; t < ids.size(); ++t) {
      tokens.push_back(ids[t]);
      positions.push_back(static_cast<int32_t>(t));
      targets.push_back(!tgts.empty() ? tgts[t] : t + 1 < ids.size() ? ids[t + 1] : -1);
    }
    cu_seqlens.push_back(static_cast<int32_t>(tokens.size()));
  }
  PackedBatch batch() const { return {tokens, positions, cu_seqlens, targets}; }
};

// log_softmax of each row of `logits` (T, V) and the entropy of each row.
void log_softmax_rows(const std::vector<float>& logits, int64_t vocab, std::vector<float>* logp,
                      std::vector<float>* entropy) {
  const size_t rows = logits.size() / static_cast<size_t>(vocab);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    double max = row[0], sum = 0, h = 0;
    for (int64_t v = 0; v < vocab; ++v) max = std::max<double>(max, row[v]);
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    for (int64_t v = 0; v < vocab; ++v) {
      const double lp = row[v] - max - std::log(sum);
      logp->push_back(static_cast<float>(lp));
      h -= std::exp(lp) * lp;
    }
    entropy->push_back(static_cast<float>(h));
  }
}

class HfModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto ref = testing::load_hf_reference(std::string(RLRUN_HF_REFERENCE_DIR) + "/" + GetParam());
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    ref_ = std::move(ref).value();
    auto backend = create_backend("cpu", 1);
    ASSERT_TRUE(backend.ok()) << backend.status().to_string();
    backend_ = std::move(backend).value();
    auto model = load_model(*backend_, ref_.dir + "/model");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(model).value();
  }
  std::string name(const std::string& what) const { return GetParam() + " " + what; }
  int64_t vocab() const { return ref_.model.config.vocab_size; }

  // Per-token log-probs of `batch` restricted to rows with a target (in order).
  std::vector<float> logprobs_of(const HostBatch& hb, std::vector<float>* entropy = nullptr) {
    auto out = model_->forward(hb.batch(), /*for_backward=*/false);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) return {};
    const std::vector<float> lp = to_host_f32(out->logprobs), h = to_host_f32(out->entropy);
    std::vector<float> kept;
    for (size_t i = 0; i < lp.size(); ++i) {
      if (hb.targets[i] < 0) continue;
      kept.push_back(lp[i]);
      if (entropy != nullptr) entropy->push_back(h[i]);
    }
    return kept;
  }

  testing::HfReference ref_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
};

// The training path (Model::forward) on each sequence alone and on both packed into one row:
// next-token log-probs and the entropy of every predicted distribution.
TEST_P(HfModel, LogprobsAndEntropyMatchTransformers) {
  std::vector<float> want_all, got_packed_expected;
  HostBatch packed;
  for (size_t s = 0; s < ref_.sequences.size(); ++s) {
    HostBatch alone;
    alone.add(ref_.sequences[s]);
    packed.add(ref_.sequences[s]);
    std::vector<float> entropy, ref_logp, ref_entropy;
    const std::vector<float> got = logprobs_of(alone, &entropy);
    log_softmax_rows(ref_.logits[s], vocab(), &ref_logp, &ref_entropy);
    ref_entropy.pop_back();  // the last token predicts nothing here
    const Diff lp = compare(got, ref_.logprobs[s]), h = compare(entropy, ref_entropy);
    report(name(str("logprobs, sequence ", s, " alone")), lp);
    report(name(str("entropy, sequence ", s, " alone")), h);
    EXPECT_LE(lp.max_rel, kLogprobTol) << "token " << lp.at;
    EXPECT_LE(h.max_rel, kLogprobTol) << "token " << h.at;
    want_all.insert(want_all.end(), ref_.logprobs[s].begin(), ref_.logprobs[s].end());
  }
  const Diff d = compare(logprobs_of(packed), want_all);
  report(name("logprobs, both sequences packed in one row"), d);
  EXPECT_LE(d.max_rel, kLogprobTol) << "token " << d.at;
}

// Every entry of every log-softmax row through the training path: the sequence is packed once
// per vocabulary entry v, every target = v, so row t of copy v holds log p(v | ids[<=t]).
TEST_P(HfModel, FullLogSoftmaxMatchesTransformers) {
  for (size_t s = 0; s < ref_.sequences.size(); ++s) {
    const std::vector<int32_t>& ids = ref_.sequences[s];
    HostBatch hb;
    for (int32_t v = 0; v < vocab(); ++v) hb.add(ids, std::vector<int32_t>(ids.size(), v));
    const std::vector<float> lp = logprobs_of(hb);  // (V copies, T) -> transpose to (T, V)
    ASSERT_EQ(lp.size(), ids.size() * vocab());
    std::vector<float> got(lp.size()), want, unused;
    for (int64_t v = 0; v < vocab(); ++v)
      for (size_t t = 0; t < ids.size(); ++t) got[t * vocab() + v] = lp[v * ids.size() + t];
    log_softmax_rows(ref_.logits[s], vocab(), &want, &unused);
    const Diff d = compare(got, want);
    report(name(str("log_softmax (T, V), sequence ", s)), d);
    EXPECT_LE(d.max_rel, kLogprobTol) << "row " << d.at / vocab() << " token " << d.at % vocab();
  }
}

// The inference path: raw logits of every position, from a prefill of the first token followed
// by one decode step per token over the paged KV cache (block size 4: several blocks).
TEST_P(HfModel, CachedLogitsMatchTransformers) {
  for (size_t s = 0; s < ref_.sequences.size(); ++s) {
    const std::vector<int32_t>& ids = ref_.sequences[s];
    auto cache = KvCache::create(*backend_, KvCacheConfig::for_model(model_->config(), 4, 8));
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    ASSERT_TRUE((*cache)->add_sequence(7).ok());
    const SeqId seqs[] = {7};
    std::vector<float> got;
    for (size_t t = 0; t < ids.size(); ++t) {
      const int32_t tok[] = {ids[t]}, cu[] = {0, 1};
      auto logits = t == 0 ? model_->forward_cached(**cache, seqs, tok, cu) : model_->decode(**cache, seqs, tok);
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      const std::vector<float> row = to_host_f32(*logits);
      got.insert(got.end(), row.begin(), row.end());
    }
    const Diff d = compare(got, ref_.logits[s]);
    report(name(str("logits (T, V) via KV-cache decode, sequence ", s)), d);
    EXPECT_LE(d.max_rel, kLogprobTol) << "row " << d.at / vocab() << " token " << d.at % vocab();
  }
}

HostBatch both_sequences(const testing::HfReference& ref) {
  HostBatch hb;
  for (const auto& ids : ref.sequences) hb.add(ids);
  return hb;
}

// The loss (mean next-token NLL over both sequences, packed) and d loss / d param for EVERY
// parameter (a tied embedding's gradient includes the lm_head's share, as in torch).
TEST_P(HfModel, LossAndEveryGradientMatchTransformers) {
  const HostBatch hb = both_sequences(ref_);
  model_->weights().zero_grads();
  auto loss = mean_nll_backward(*model_, hb.batch());
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  std::printf("[hf_model] %s loss %.9g vs transformers %.9g (diff %.3g)\n", GetParam().c_str(), *loss, ref_.loss,
              *loss - ref_.loss);
  EXPECT_LE(std::fabs(*loss - ref_.loss) / (1 + std::fabs(ref_.loss)), kLogprobTol);
  double worst = 0;
  std::string worst_name;
  ASSERT_EQ(ref_.grads.size(), model_->weights().params().size());
  for (const HostTensor& want : ref_.grads) {
    auto i = model_->weights().index_of(want.name);
    ASSERT_TRUE(i.ok()) << i.status().to_string();
    const Diff d = compare(to_host_f32(model_->weights().grad(*i)), want.data);
    const double rel = d.max_abs / (d.ref_scale + 1e-7 / kGradTol);
    EXPECT_LE(rel, kGradTol) << want.name << ": max |diff| " << d.max_abs << " at " << d.at << ", max |grad| "
                             << d.ref_scale;
    if (rel > worst) worst = rel, worst_name = want.name;
  }
  std::printf("[hf_model] %s gradients: largest max|diff|/max|grad| %.3g (%s)\n", GetParam().c_str(), worst,
              worst_name.c_str());
}

// Adam divides each update by the gradient's own running RMS, so where the true gradient is ~0
// the update is round-off divided by round-off: +-lr per step either way (k_proj biases are the
// extreme case: softmax ignores a shift of every score, so their exact gradient is 0). Elements
// whose step-1 gradient is above the round-off floor must match within kAdamTol; the rest only
// within the 2 * lr * steps by which two updates can move them apart.
void compare_adamw_result(const std::string& variant, const testing::HfReference& ref, const ModelWeights& w) {
  double global_grad_max = 0;
  for (const HostTensor& g : ref.grads)
    for (float x : g.data) global_grad_max = std::max(global_grad_max, std::fabs(double{x}));
  const double loose_tol = 2 * ref.adamw.lr * ref.adamw.steps + kAdamTol;
  double worst = 0, worst_loose = 0;
  std::string worst_name;
  size_t loose = 0, total = 0, bad = 0;
  for (size_t k = 0; k < ref.adamw_step3.size(); ++k) {
    const HostTensor &want = ref.adamw_step3[k], &grad = ref.grads[k];
    ASSERT_EQ(grad.name, want.name);
    auto i = w.index_of(want.name);
    ASSERT_TRUE(i.ok()) << i.status().to_string();
    const std::vector<float> got = to_host_f32(w.master(*i));
    ASSERT_EQ(got.size(), want.data.size());
    double grad_max = 0;
    for (float x : grad.data) grad_max = std::max(grad_max, std::fabs(double{x}));
    const double floor = std::max(kAdamGradFloor * grad_max, 1e-2 * kAdamGradFloor * global_grad_max);
    for (size_t e = 0; e < got.size(); ++e) {
      const double diff = std::fabs(double{got[e]} - want.data[e]);
      const bool determined = std::fabs(grad.data[e]) > floor;
      ++total;
      if (!(diff <= (determined ? kAdamTol : loose_tol)) && ++bad <= 5) {
        ADD_FAILURE() << want.name << "[" << e << "]: |diff| " << diff << "; step-1 grad " << grad.data[e]
                      << " (round-off floor " << floor << ")";
      }
      if (!determined) {
        ++loose;
        worst_loose = std::max(worst_loose, diff);
      } else if (diff > worst) {
        worst = diff;
        worst_name = want.name;
      }
    }
  }
  std::printf("[hf_model] %s params after %d AdamW steps: largest |diff| %.3g (%s) over %zu elements with a "
              "gradient above round-off; %.3g over the other %zu (bound %.3g)\n",
              variant.c_str(), ref.adamw.steps, worst, worst_name.c_str(), total - loose, worst_loose, loose, loose_tol);
  EXPECT_EQ(bad, 0u) << "elements outside tolerance";
}

// Three AdamW steps on the same loss with the reference hyper-parameters (weight decay on every
// parameter, constant lr) through Backend::adamw_step, against torch.optim.AdamW.
TEST_P(HfModel, ThreeAdamWStepsMatchTorch) {
  const HostBatch hb = both_sequences(ref_);
  ModelWeights& w = model_->weights();
  Tensor m = backend_->zeros({w.flat_size()}, DType::kF32), v = backend_->zeros({w.flat_size()}, DType::kF32);
  const testing::HfAdamW& a = ref_.adamw;
  for (int step = 1; step <= a.steps; ++step) {
    w.zero_grads();
    auto loss = mean_nll_backward(*model_, hb.batch());
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    EXPECT_LE(std::fabs(*loss - ref_.losses[step - 1]) / (1 + ref_.losses[step - 1]), kLogprobTol)
        << "loss before step " << step << ": " << *loss << " vs " << ref_.losses[step - 1];
    const AdamWParams p{static_cast<float>(a.lr), static_cast<float>(a.beta1), static_cast<float>(a.beta2),
                        static_cast<float>(a.eps), static_cast<float>(a.weight_decay), step};
    backend_->adamw_step(w.master_flat(), w.grad_flat(), m, v, p);
    w.sync_compute();
  }
  auto final_loss = mean_nll(*model_, hb.batch());
  ASSERT_TRUE(final_loss.ok());
  std::printf("[hf_model] %s loss after %d AdamW steps %.9g vs torch %.9g\n", GetParam().c_str(), a.steps,
              *final_loss, ref_.losses.back());
  EXPECT_LE(std::fabs(*final_loss - ref_.losses.back()) / (1 + ref_.losses.back()), kLogprobTol);
  compare_adamw_result(GetParam(), ref_, w);
}

// model_io round trip: save_weights then load_model gives the same parameters, in spec order.
TEST_P(HfModel, SaveWeightsLoadsBackIdentically) {
  const std::string dir = ref_.dir + "/rlrun_model_io";
  ASSERT_TRUE(save_weights(*model_, dir, DType::kF32).ok());
  auto back = load_model(*backend_, dir);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(to_host_f32((*back)->weights().master_flat()), to_host_f32(model_->weights().master_flat()));
  const std::vector<HostTensor> host = weights_to_host(**back);
  ASSERT_EQ(host.size(), ref_.model.tensors.size());
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(host[i].name, ref_.model.tensors[i].name);
    EXPECT_EQ(host[i].data, ref_.model.tensors[i].data) << host[i].name;
  }
}

TEST_P(HfModel, LoadWeightsRejectsMissingWrongAndDuplicateTensors) {
  std::vector<HostTensor> tensors = ref_.model.tensors;
  tensors.pop_back();
  Status missing = load_weights(*model_, tensors);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find(ref_.model.tensors.back().name), std::string::npos) << missing.to_string();
  tensors.push_back(ref_.model.tensors.front());
  EXPECT_NE(load_weights(*model_, tensors).message().find("twice"), std::string::npos);
  tensors = ref_.model.tensors;
  tensors[0].shape[0] -= 1;
  tensors[0].data.resize(tensors[0].data.size() - tensors[0].shape[1]);
  EXPECT_NE(load_weights(*model_, tensors).message().find("shape"), std::string::npos);
  tensors = ref_.model.tensors;
  tensors[0].name = "model.not_a_parameter";
  EXPECT_FALSE(load_weights(*model_, tensors).ok());
}

INSTANTIATE_TEST_SUITE_P(Variants, HfModel, ::testing::Values("llama", "llama_tied", "qwen2"));

}  // namespace
}  // namespace rlrun::engine
