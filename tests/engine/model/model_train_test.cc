// Training forward/backward of the decoder: packing, checkpointing, chunked logits, finite
// differences, input validation.
#include <gtest/gtest.h>

#include "engine/model/model.h"
#include "tests/engine/model/model_test_util.h"

namespace rlrun::engine {
namespace {

using testing::HostBatch;

struct Outputs {
  std::vector<float> logprobs, entropy, grads;
};

// Forward + backward with the given per-token d(logprob), d(entropy); grads start from zero.
Outputs run(Model& m, const HostBatch& hb, const std::vector<float>& dlp, const std::vector<float>& dent) {
  m.weights().zero_grads();
  auto out = m.forward(hb.batch());
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  Backend& b = m.backend();
  const int64_t n = static_cast<int64_t>(dlp.size());
  m.backward(from_host(b, {n}, dlp), from_host(b, {n}, dent));
  return {to_host_f32(out->logprobs), to_host_f32(out->entropy), to_host_f32(m.weights().grad_flat())};
}

class ModelTrain : public ::testing::TestWithParam<bool> {};  // param: qwen2 variant

// (a) A packed row of two sequences equals the two sequences run separately: log-probs,
// entropies, and the gradients (sums of the two runs' gradients).
TEST_P(ModelTrain, PackedRowMatchesSeparateSequences) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  std::mt19937 rng(7);
  const auto a = testing::random_ids(rng, 5, 64), b = testing::random_ids(rng, 9, 64);
  HostBatch ha, hb, packed;
  ha.add_sequence(a, testing::shifted_targets(a));
  hb.add_sequence(b, testing::shifted_targets(b));
  packed.add_sequence(a, testing::shifted_targets(a));
  packed.add_sequence(b, testing::shifted_targets(b));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> dlp(14), dent(14);
  for (float& x : dlp) x = nd(rng);
  for (float& x : dent) x = nd(rng);

  const Outputs p = run(*model, packed, dlp, dent);
  const Outputs oa = run(*model, ha, {dlp.begin(), dlp.begin() + 5}, {dent.begin(), dent.begin() + 5});
  const Outputs ob = run(*model, hb, {dlp.begin() + 5, dlp.end()}, {dent.begin() + 5, dent.end()});
  std::vector<float> lp = oa.logprobs, ent = oa.entropy, g = oa.grads;
  lp.insert(lp.end(), ob.logprobs.begin(), ob.logprobs.end());
  ent.insert(ent.end(), ob.entropy.begin(), ob.entropy.end());
  for (size_t i = 0; i < g.size(); ++i) g[i] += ob.grads[i];
  testing::expect_near_all(p.logprobs, lp, 1e-5f, "logprobs");
  testing::expect_near_all(p.entropy, ent, 1e-5f, "entropy");
  testing::expect_near_all(p.grads, g, 1e-5f, "grads");
  EXPECT_EQ(p.logprobs[4], 0.0f);  // masked target
  double gnorm = 0.0;
  for (float x : p.grads) gnorm += x * x;
  EXPECT_GT(gnorm, 1e-6);  // the comparison above is not between zeros
}

// Shared prefixes: a prompt computed once with three continuations (and a plain sequence beside
// them) gives the log-probs, entropies and gradients of the same batch with the prompt repeated
// before each continuation, with and without checkpointing. The prompt's own outputs come from
// one copy, so in the repeated layout only the first copy carries their d(logprob).
TEST_P(ModelTrain, SharedPrefixEqualsTheRepeatedPrompt) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto prompt = testing::random_ids(rng, 6, 64), other = testing::random_ids(rng, 4, 64);
  std::vector<int32_t> prompt_targets = testing::shifted_targets(prompt);  // its last: none (each continuation differs)
  const std::vector<std::vector<int32_t>> conts = {testing::random_ids(rng, 4, 64), testing::random_ids(rng, 3, 64),
                                                   testing::random_ids(rng, 5, 64)};
  HostBatch shared, repeated;
  std::vector<float> dlp_s, dent_s, dlp_r, dent_r;
  auto draws = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  const auto prompt_dlp = draws(6), prompt_dent = draws(6);
  const int32_t root = shared.add_sequence(prompt, prompt_targets);
  dlp_s = prompt_dlp;
  dent_s = prompt_dent;
  std::vector<std::pair<size_t, size_t>> cont_rows;  // (row in shared, row in repeated) of each continuation
  for (size_t i = 0; i < conts.size(); ++i) {
    const auto dl = draws(conts[i].size()), de = draws(conts[i].size());
    cont_rows.emplace_back(shared.tokens.size(), repeated.tokens.size() + prompt.size());
    shared.add_continuation(root, conts[i], testing::shifted_targets(conts[i]));
    dlp_s.insert(dlp_s.end(), dl.begin(), dl.end());
    dent_s.insert(dent_s.end(), de.begin(), de.end());
    std::vector<int32_t> full = prompt, full_targets = prompt_targets;
    full.insert(full.end(), conts[i].begin(), conts[i].end());
    const auto ct = testing::shifted_targets(conts[i]);
    full_targets.insert(full_targets.end(), ct.begin(), ct.end());
    repeated.add_sequence(full, full_targets);
    for (size_t t = 0; t < prompt.size(); ++t) {
      dlp_r.push_back(i == 0 ? prompt_dlp[t] : 0.0f);
      dent_r.push_back(i == 0 ? prompt_dent[t] : 0.0f);
    }
    dlp_r.insert(dlp_r.end(), dl.begin(), dl.end());
    dent_r.insert(dent_r.end(), de.begin(), de.end());
  }
  const auto dl = draws(4), de = draws(4);
  shared.add_sequence(other, testing::shifted_targets(other));
  repeated.add_sequence(other, testing::shifted_targets(other));
  for (auto* v : {&dlp_s, &dlp_r}) v->insert(v->end(), dl.begin(), dl.end());
  for (auto* v : {&dent_s, &dent_r}) v->insert(v->end(), de.begin(), de.end());

  for (bool checkpointing : {false, true}) {
    model->set_gradient_checkpointing(checkpointing);
    const Outputs s = run(*model, shared, dlp_s, dent_s);
    const Outputs r = run(*model, repeated, dlp_r, dent_r);
    std::vector<float> lp_s, lp_r, ent_s, ent_r;
    auto take = [](std::vector<float>& to, const std::vector<float>& from, size_t at, size_t n) {
      to.insert(to.end(), from.begin() + at, from.begin() + at + n);
    };
    take(lp_s, s.logprobs, 0, 6);
    take(lp_r, r.logprobs, 0, 6);
    take(ent_s, s.entropy, 0, 6);
    take(ent_r, r.entropy, 0, 6);
    for (size_t i = 0; i < conts.size(); ++i) {
      take(lp_s, s.logprobs, cont_rows[i].first, conts[i].size());
      take(lp_r, r.logprobs, cont_rows[i].second, conts[i].size());
      take(ent_s, s.entropy, cont_rows[i].first, conts[i].size());
      take(ent_r, r.entropy, cont_rows[i].second, conts[i].size());
    }
    take(lp_s, s.logprobs, s.logprobs.size() - 4, 4);
    take(lp_r, r.logprobs, r.logprobs.size() - 4, 4);
    testing::expect_near_all(lp_s, lp_r, 1e-5f, "logprobs");
    testing::expect_near_all(ent_s, ent_r, 1e-5f, "entropy");
    testing::expect_near_all(s.grads, r.grads, 1e-5f, "grads");
    double gnorm = 0.0;
    for (float x : s.grads) gnorm += x * x;
    EXPECT_GT(gnorm, 1e-6);
  }
}

// A chain of prefixes: a common start (a system prompt) computed once, two prompts continuing it,
// and samples continuing each prompt give the log-probs, entropies and gradients of every sample
// written out whole. Prefix tokens have no target (as the trainer packs them).
TEST_P(ModelTrain, APrefixChainEqualsTheWrittenOutSamples) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto start = testing::random_ids(rng, 5, 64);
  const std::vector<std::vector<int32_t>> prompts = {testing::random_ids(rng, 3, 64), testing::random_ids(rng, 2, 64)};
  const std::vector<std::vector<int32_t>> samples = {testing::random_ids(rng, 4, 64), testing::random_ids(rng, 3, 64),
                                                     testing::random_ids(rng, 5, 64)};
  const std::vector<int> prompt_of = {0, 0, 1};
  auto none = [](size_t n) { return std::vector<int32_t>(n, -1); };
  HostBatch chain, whole;
  std::vector<float> dlp_c, dent_c, dlp_w, dent_w;
  const int32_t root = chain.add_sequence(start, none(start.size()));
  std::vector<int32_t> prompt_seg;
  for (const auto& p : prompts) prompt_seg.push_back(chain.add_continuation(root, p, none(p.size())));
  dlp_c.assign(chain.tokens.size(), 0.0f);
  dent_c = dlp_c;
  std::vector<std::pair<size_t, size_t>> rows;  // (row in chain, row in whole) of each sample
  for (size_t i = 0; i < samples.size(); ++i) {
    std::vector<float> dl(samples[i].size()), de(samples[i].size());
    for (size_t t = 0; t < dl.size(); ++t) dl[t] = nd(rng), de[t] = nd(rng);
    rows.emplace_back(chain.tokens.size(), 0);
    chain.add_continuation(prompt_seg[prompt_of[i]], samples[i], testing::shifted_targets(samples[i]));
    dlp_c.insert(dlp_c.end(), dl.begin(), dl.end());
    dent_c.insert(dent_c.end(), de.begin(), de.end());
    std::vector<int32_t> ids = start, targets = none(start.size() + prompts[prompt_of[i]].size());
    ids.insert(ids.end(), prompts[prompt_of[i]].begin(), prompts[prompt_of[i]].end());
    rows.back().second = whole.tokens.size() + ids.size();
    ids.insert(ids.end(), samples[i].begin(), samples[i].end());
    const auto st = testing::shifted_targets(samples[i]);
    targets.insert(targets.end(), st.begin(), st.end());
    whole.add_sequence(ids, targets);
    dlp_w.resize(whole.tokens.size() - samples[i].size(), 0.0f);
    dent_w.resize(dlp_w.size(), 0.0f);
    dlp_w.insert(dlp_w.end(), dl.begin(), dl.end());
    dent_w.insert(dent_w.end(), de.begin(), de.end());
  }
  for (bool checkpointing : {false, true}) {
    model->set_gradient_checkpointing(checkpointing);
    const Outputs c = run(*model, chain, dlp_c, dent_c);
    const Outputs w = run(*model, whole, dlp_w, dent_w);
    for (size_t i = 0; i < samples.size(); ++i) {
      const size_t n = samples[i].size();
      auto part = [n](const std::vector<float>& v, size_t at) { return std::vector<float>(v.begin() + at, v.begin() + at + n); };
      testing::expect_near_all(part(c.logprobs, rows[i].first), part(w.logprobs, rows[i].second), 1e-5f, "logprobs");
      testing::expect_near_all(part(c.entropy, rows[i].first), part(w.entropy, rows[i].second), 1e-5f, "entropy");
    }
    testing::expect_near_all(c.grads, w.grads, 1e-5f, "grads");
    double gnorm = 0.0;
    for (float x : c.grads) gnorm += x * x;
    EXPECT_GT(gnorm, 1e-6);
  }
}

TEST_P(ModelTrain, RejectsMalformedPrefixes) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  HostBatch hb;
  const int32_t root = hb.add_sequence({1, 2, 3}, {2, 3, -1});
  const int32_t cont = hb.add_continuation(root, {4, 5}, {5, -1});
  hb.add_continuation(root, {6}, {-1});
  ASSERT_TRUE(model->forward(hb.batch(), false).ok());
  HostBatch bad = hb;
  bad.prefix_of[cont] = cont;  // itself
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  bad = hb;
  bad.prefix_of[2] = cont;  // continues a continuation, but its positions do not go on from it
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  bad = hb;
  bad.prefix_of.pop_back();
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  bad = hb;
  bad.positions[3] = 0;  // does not go on from the prefix
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
}

// (c) Gradient checkpointing and chunked logits change memory and time, never the numbers.
TEST_P(ModelTrain, CheckpointingAndLogitChunksGiveIdenticalGradients) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  std::mt19937 rng(3);
  HostBatch hb;
  for (size_t len : {7, 12, 3}) {
    const auto t = testing::random_ids(rng, len, 64);
    hb.add_sequence(t, testing::shifted_targets(t));
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> dlp(22), dent(22);
  for (float& x : dlp) x = nd(rng);
  for (float& x : dent) x = nd(rng);

  const Outputs plain = run(*model, hb, dlp, dent);
  model->set_gradient_checkpointing(true);
  const Outputs ckpt = run(*model, hb, dlp, dent);
  EXPECT_EQ(plain.grads, ckpt.grads);  // the recomputation runs the same ops on the same inputs
  EXPECT_EQ(plain.logprobs, ckpt.logprobs);

  // 5 tokens of logits at a time: the head recomputes its logits chunk by chunk in backward
  // (the lm_head gradient then sums chunk by chunk: equal up to float reassociation).
  auto chunked = testing::tiny_model(*backend, GetParam(), 1, 0.2f, ModelOptions{.gradient_checkpointing = true, .logits_chunk_elements = 5 * 64});
  const Outputs ch = run(*chunked, hb, dlp, dent);
  testing::expect_near_all(ch.grads, plain.grads, 1e-5f, "chunked grads");
  testing::expect_near_all(ch.logprobs, plain.logprobs, 1e-5f, "chunked logprobs");
}

TEST_P(ModelTrain, CheckpointingKeepsOnlyLayerInputs) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  std::mt19937 rng(5);
  HostBatch hb;
  const auto t = testing::random_ids(rng, 40, 64);
  hb.add_sequence(t, testing::shifted_targets(t));
  ASSERT_TRUE(model->forward(hb.batch()).ok());
  const int64_t full = model->saved_activation_bytes();
  const ModelConfig& c = model->config();
  // The head scores the 39 tokens with a target only.
  EXPECT_EQ(full, estimate_saved_activation_bytes(c, 40, DType::kF32, false, int64_t{1} << 24, 39));
  model->set_gradient_checkpointing(true);
  ASSERT_TRUE(model->forward(hb.batch()).ok());
  const int64_t ckpt = model->saved_activation_bytes();
  EXPECT_EQ(ckpt, estimate_saved_activation_bytes(c, 40, DType::kF32, true, int64_t{1} << 24, 39));
  EXPECT_LT(ckpt * 2, full) << full << " vs " << ckpt;
  ASSERT_TRUE(model->forward(hb.batch(), /*for_backward=*/false).ok());
  EXPECT_EQ(model->saved_activation_bytes(), 0);
}

// (d) Analytic gradients of mean NLL against central differences, for entries of every kind of
// parameter of the whole model.
TEST_P(ModelTrain, GradientsMatchFiniteDifferences) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam(), 11, 0.3f);
  std::mt19937 rng(9);
  HostBatch hb;
  for (size_t len : {6, 4}) {
    const auto t = testing::random_ids(rng, len, 64);
    hb.add_sequence(t, testing::shifted_targets(t));
  }
  ModelWeights& w = model->weights();
  w.zero_grads();
  ASSERT_TRUE(mean_nll_backward(*model, hb.batch()).ok());
  const std::vector<float> grads = to_host_f32(w.grad_flat());
  std::vector<float> master = to_host_f32(w.master_flat());

  const double eps = 3e-3;
  int checked = 0;
  for (size_t i = 0; i < w.params().size(); ++i) {
    const ParamInfo& p = w.params()[i];
    if (p.name.find("layers.1.") != std::string::npos) continue;  // layer 0 covers the kinds
    for (int64_t e : {int64_t{0}, p.numel / 2 + 1, p.numel - 1}) {
      const size_t at = static_cast<size_t>(p.offset + e);
      const float saved = master[at];
      auto loss_at = [&](double delta) {
        master[at] = static_cast<float>(saved + delta);
        backend->copy_from_host(w.master_flat(), master.data(), master.size() * sizeof(float));
        w.sync_compute();
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
  backend->copy_from_host(w.master_flat(), master.data(), master.size() * sizeof(float));
  EXPECT_GT(checked, 30);
}

// Micro-batches accumulate: two backward passes without zeroing give twice the gradient.
TEST_P(ModelTrain, BackwardAccumulatesIntoTheGradBuffer) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  std::mt19937 rng(13);
  HostBatch hb;
  const auto t = testing::random_ids(rng, 10, 64);
  hb.add_sequence(t, testing::shifted_targets(t));
  model->weights().zero_grads();
  ASSERT_TRUE(mean_nll_backward(*model, hb.batch()).ok());
  std::vector<float> once = to_host_f32(model->weights().grad_flat());
  ASSERT_TRUE(mean_nll_backward(*model, hb.batch()).ok());
  for (float& x : once) x *= 2.0f;
  testing::expect_near_all(to_host_f32(model->weights().grad_flat()), once, 1e-6f, "accumulated grads");
}

TEST_P(ModelTrain, RejectsMalformedBatches) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  HostBatch hb;
  hb.add_sequence({1, 2, 3}, {2, 3, -1});
  HostBatch bad = hb;
  bad.tokens[1] = 64;
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  bad = hb;
  bad.targets[0] = 99;
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  bad = hb;
  bad.cu_seqlens = {0, 2};
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  bad = hb;
  bad.cu_seqlens = {0, 0, 3};
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  bad = hb;
  bad.positions.pop_back();
  EXPECT_EQ(model->forward(bad.batch()).status().code(), StatusCode::kInvalidArgument);
  HostBatch none;
  none.add_sequence({1, 2}, {-1, -1});
  EXPECT_EQ(mean_nll(*model, none.batch()).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelTrain, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "qwen2_tied_bias" : "llama"; });

}  // namespace
}  // namespace rlrun::engine
