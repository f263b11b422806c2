// Inference over the paged KV cache against the training forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "tests/engine/model/model_test_util.h"

namespace rlrun::engine {
namespace {

using testing::HostBatch;

// log softmax(logits)[target] and the entropy of one row, in double.
std::pair<float, float> logprob_entropy(const float* row, int64_t v, int32_t target) {
  double m = row[0];
  for (int64_t j = 1; j < v; ++j) m = std::max<double>(m, row[j]);
  double z = 0.0;
  for (int64_t j = 0; j < v; ++j) z += std::exp(row[j] - m);
  const double lse = m + std::log(z);
  double ent = 0.0;
  for (int64_t j = 0; j < v; ++j) {
    const double lp = row[j] - lse;
    ent -= std::exp(lp) * lp;
  }
  return {static_cast<float>(row[target] - lse), static_cast<float>(ent)};
}

std::unique_ptr<KvCache> make_cache(Backend& b, const ModelConfig& c, int64_t block_size, int64_t blocks) {
  auto cache = KvCache::create(b, KvCacheConfig::for_model(c, block_size, blocks));
  EXPECT_TRUE(cache.ok());
  return std::move(cache).value();
}

class ModelInfer : public ::testing::TestWithParam<bool> {};

// (b) Prefill of unequal prompts, then batched decode of sequences of unequal lengths (each drops
// out of the batch when done) reproduce the training forward's log-prob and entropy at every
// position the cache returns logits for: with prompts of 1 token that is EVERY position, with
// longer prompts every position from the prompt's last on. Blocks of 4 tokens, sequences
// interleaved, so block tables are not contiguous.
void check_prefill_and_decode(bool qwen2, const std::vector<int32_t>& prompt) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, qwen2);
  const int64_t v = model->config().vocab_size;
  std::mt19937 rng(21);
  const std::vector<size_t> lens = {6, 11, 4};
  std::vector<std::vector<int32_t>> toks, tgts;
  HostBatch full;
  for (size_t len : lens) {
    toks.push_back(testing::random_ids(rng, len, 64));
    tgts.push_back(testing::random_ids(rng, len, 64));  // any targets: we compare distributions
    full.add_sequence(toks.back(), tgts.back());
  }
  auto ref = model->forward(full.batch(), /*for_backward=*/false);
  ASSERT_TRUE(ref.ok());
  const std::vector<float> ref_lp = to_host_f32(ref->logprobs), ref_ent = to_host_f32(ref->entropy);

  auto cache = make_cache(*backend, model->config(), 4, 16);
  const std::vector<SeqId> ids = {100, 7, 42};
  std::vector<int32_t> flat, cu = {0};
  for (size_t s = 0; s < ids.size(); ++s) {
    ASSERT_TRUE(cache->add_sequence(ids[s]).ok());
    flat.insert(flat.end(), toks[s].begin(), toks[s].begin() + prompt[s]);
    cu.push_back(static_cast<int32_t>(flat.size()));
  }
  auto compare = [&](const Tensor& logits, const std::vector<size_t>& which, const std::vector<size_t>& pos) {
    const std::vector<float> l = to_host_f32(logits);
    ASSERT_EQ(l.size(), which.size() * v);
    for (size_t r = 0; r < which.size(); ++r) {
      const size_t s = which[r], at = full.cu_seqlens[s] + pos[r];
      const auto [lp, ent] = logprob_entropy(l.data() + r * v, v, tgts[s][pos[r]]);
      EXPECT_NEAR(lp, ref_lp[at], 2e-5) << "sequence " << s << " position " << pos[r];
      EXPECT_NEAR(ent, ref_ent[at], 2e-5) << "sequence " << s << " position " << pos[r];
    }
  };
  auto logits = model->forward_cached(*cache, ids, flat, cu);
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();
  compare(*logits, {0, 1, 2}, {size_t(prompt[0] - 1), size_t(prompt[1] - 1), size_t(prompt[2] - 1)});

  int checked = 3;
  for (size_t step = 0;; ++step) {
    std::vector<SeqId> batch_ids;
    std::vector<int32_t> next;
    std::vector<size_t> which, pos;
    for (size_t s = 0; s < ids.size(); ++s) {
      const size_t p = prompt[s] + step;
      if (p >= lens[s]) continue;
      batch_ids.push_back(ids[s]);
      next.push_back(toks[s][p]);
      which.push_back(s);
      pos.push_back(p);
    }
    if (batch_ids.empty()) break;
    auto dl = model->decode(*cache, batch_ids, next);
    ASSERT_TRUE(dl.ok()) << dl.status().to_string();
    compare(*dl, which, pos);
    checked += static_cast<int>(which.size());
  }
  EXPECT_EQ(checked, 6 + 11 + 4 - (prompt[0] - 1) - (prompt[1] - 1) - (prompt[2] - 1));
  for (size_t s = 0; s < ids.size(); ++s) EXPECT_EQ(cache->length(ids[s]), static_cast<int64_t>(lens[s]));
}

TEST_P(ModelInfer, DecodeFromOneTokenReproducesEveryPosition) { check_prefill_and_decode(GetParam(), {1, 1, 1}); }
TEST_P(ModelInfer, PrefillOfUnequalPromptsThenDecodeReproduceTheFullForward) {
  check_prefill_and_decode(GetParam(), {1, 7, 2});
}

// Released blocks are reused by a new sequence, whose results do not see the old K/V; a batch
// that does not fit fails whole, leaving the cache as it was.
TEST_P(ModelInfer, ReleasedBlocksAreReusedAndExhaustionIsAnError) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  std::mt19937 rng(5);
  const auto a = testing::random_ids(rng, 9, 64), b = testing::random_ids(rng, 7, 64);
  auto cache = make_cache(*backend, model->config(), 4, 3);
  ASSERT_TRUE(cache->add_sequence(1).ok());
  std::vector<int32_t> cu = {0, 9};
  ASSERT_TRUE(model->forward_cached(*cache, std::vector<SeqId>{1}, a, cu).ok());
  EXPECT_EQ(cache->num_free_blocks(), 0);

  ASSERT_TRUE(cache->add_sequence(2).ok());
  cu = {0, 7};
  auto full = model->forward_cached(*cache, std::vector<SeqId>{2}, b, cu);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->length(2), 0);
  EXPECT_EQ(cache->tables().capacity(2), 0);

  ASSERT_TRUE(cache->release(1).ok());
  auto got = model->forward_cached(*cache, std::vector<SeqId>{2}, b, cu);
  ASSERT_TRUE(got.ok());
  auto fresh_cache = make_cache(*backend, model->config(), 4, 3);
  ASSERT_TRUE(fresh_cache->add_sequence(2).ok());
  auto want = model->forward_cached(*fresh_cache, std::vector<SeqId>{2}, b, cu);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(to_host_f32(*got), to_host_f32(*want));
}

TEST_P(ModelInfer, RejectsBadRequests) {
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, GetParam());
  auto cache = make_cache(*backend, model->config(), 4, 8);
  ASSERT_TRUE(cache->add_sequence(1).ok());
  const std::vector<SeqId> one = {1}, two = {1, 1}, unknown = {9};
  const std::vector<int32_t> toks = {1, 2};
  EXPECT_EQ(model->forward_cached(*cache, unknown, toks, std::vector<int32_t>{0, 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(model->forward_cached(*cache, two, toks, std::vector<int32_t>{0, 1, 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(model->forward_cached(*cache, one, std::vector<int32_t>{1, 64}, std::vector<int32_t>{0, 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(model->decode(*cache, one, toks).status().code(), StatusCode::kInvalidArgument);
  ModelConfig other = model->config();
  other.num_layers = 3;
  auto wrong = make_cache(*backend, other, 4, 8);
  ASSERT_TRUE(wrong->add_sequence(1).ok());
  EXPECT_EQ(model->decode(*wrong, one, std::vector<int32_t>{1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KvCache::create(*backend, KvCacheConfig::for_model(other, 0, 8)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->length(1), 0);  // nothing was appended by the failed calls
}

// A model whose every layer attends within a sliding window of 5 trims each sequence's blocks that
// all later queries' windows have left behind (KvCacheConfig::window); one with a full-attention
// layer (Gemma 3's global ones) keeps them all.
ModelConfig sliding_config(bool every_layer) {
  ModelConfig c = testing::tiny_config(false);
  c.sliding_window = 5;
  c.layer_types = {"sliding_attention", every_layer ? "sliding_attention" : "full_attention"};
  return c;
}

struct GreedyRun {
  std::vector<std::vector<int32_t>> ids;  // per sequence
  std::vector<float> last_logits;
  int64_t max_blocks_used = 0, blocks_trimmed = 0;
};

// Sequence 1 prefills `prompt`; sequence 2 forks all of it but its last token and computes that
// token; then both decode greedily `steps` tokens, batched.
GreedyRun greedy_pair(Model& model, const KvCacheConfig& kc, const std::vector<int32_t>& prompt, int steps) {
  GreedyRun run;
  auto created = KvCache::create(model.backend(), kc);
  EXPECT_TRUE(created.ok());
  KvCache& cache = **created;
  const int64_t v = model.config().vocab_size;
  auto argmax = [&](const std::vector<float>& rows, int64_t r) {
    const auto row = rows.begin() + r * v;
    return static_cast<int32_t>(std::max_element(row, row + v) - row);
  };
  EXPECT_TRUE(cache.add_sequence(1).ok() && cache.add_sequence(2).ok());
  const std::vector<int32_t> cu = {0, static_cast<int32_t>(prompt.size())};
  auto first = model.forward_cached(cache, std::vector<SeqId>{1}, prompt, cu);
  EXPECT_TRUE(first.ok());
  const int64_t shared = static_cast<int64_t>(prompt.size()) - 1;
  EXPECT_TRUE(cache.fork(1, 2, shared).ok());
  auto second = model.forward_cached(cache, std::vector<SeqId>{2}, std::vector<int32_t>{prompt.back()},
                                     std::vector<int32_t>{0, 1});
  EXPECT_TRUE(second.ok());
  run.ids = {{argmax(to_host_f32(*first), 0)}, {argmax(to_host_f32(*second), 0)}};
  for (int t = 0; t < steps; ++t) {
    const std::vector<int32_t> next = {run.ids[0].back(), run.ids[1].back()};
    auto logits = model.decode(cache, std::vector<SeqId>{1, 2}, next);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) break;
    run.last_logits = to_host_f32(*logits);
    for (int64_t s = 0; s < 2; ++s) run.ids[s].push_back(argmax(run.last_logits, s));
    run.max_blocks_used = std::max(run.max_blocks_used, kc.num_blocks - cache.num_free_blocks());
  }
  run.blocks_trimmed = cache.blocks_trimmed();
  EXPECT_TRUE(cache.release(1).ok() && cache.release(2).ok());
  EXPECT_EQ(cache.num_free_blocks(), kc.num_blocks) << "a trimmed block was lost or returned twice";
  return run;
}

TEST(ModelInferWindow, AllSlidingModelFreesBlocksOutsideTheWindowAndDecodesTheSame) {
  auto backend = testing::cpu_backend();
  auto created = Model::create(*backend, sliding_config(/*every_layer=*/true));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  Model& model = **created;
  model.weights().init_random(3, 0.5f);
  std::mt19937 rng(8);
  const auto prompt = testing::random_ids(rng, 10, 64);
  KvCacheConfig trims = KvCacheConfig::for_model(model.config(), 4, 64);
  ASSERT_EQ(trims.window, 5);
  KvCacheConfig keeps = trims;
  keeps.window = 0;
  const int kSteps = 100;  // 110 cached positions: 28 blocks of 4 per sequence if nothing were freed
  const GreedyRun kept = greedy_pair(model, keeps, prompt, kSteps), trimmed = greedy_pair(model, trims, prompt, kSteps);
  EXPECT_EQ(trimmed.ids, kept.ids);
  EXPECT_EQ(trimmed.last_logits, kept.last_logits);
  EXPECT_EQ(kept.blocks_trimmed, 0);
  EXPECT_EQ(kept.max_blocks_used, 2 * 28 - 2) << "the fork shares the prompt's 2 full blocks";
  // Between steps a sequence of length L keeps positions L - 4 .. L - 1 (the next query, at L,
  // sees L - 4 .. L): at most 2 blocks of 4.
  EXPECT_LE(trimmed.max_blocks_used, 2 * 2);
  EXPECT_GE(trimmed.blocks_trimmed, 2 * (28 - 3));
  std::printf("all-sliding model, window 5, blocks of 4, 2 sequences x 110 positions: at most %lld blocks held "
              "(%lld when kept), %lld table entries freed\n",
              static_cast<long long>(trimmed.max_blocks_used), static_cast<long long>(kept.max_blocks_used),
              static_cast<long long>(trimmed.blocks_trimmed));
}

TEST(ModelInferWindow, AModelWithAFullAttentionLayerFreesNothing) {
  auto backend = testing::cpu_backend();
  auto created = Model::create(*backend, sliding_config(/*every_layer=*/false));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  (*created)->weights().init_random(3, 0.5f);
  const KvCacheConfig kc = KvCacheConfig::for_model((*created)->config(), 4, 64);
  EXPECT_EQ(kc.window, 0);
  std::mt19937 rng(8);
  const GreedyRun run = greedy_pair(**created, kc, testing::random_ids(rng, 10, 64), 40);
  EXPECT_EQ(run.blocks_trimmed, 0);
  EXPECT_EQ(run.max_blocks_used, 2 * 13 - 2);  // 50 positions: 13 blocks each, the prompt's 2 shared
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelInfer, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "qwen2_tied_bias" : "llama"; });

}  // namespace
}  // namespace rlrun::engine
