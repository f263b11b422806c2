// rollout::generate on a tiny random model: KV-cache generation agrees with recomputing from
// scratch, its log-probs are the training path's, and it stops where it should.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/tokenizer/tokenizer.h"
#include "rollout/generate.h"
#include "tests/engine/model/model_test_util.h"

namespace rlrun::rollout {
namespace {

using engine::testing::cpu_backend;
using engine::testing::tiny_model;

const std::vector<int32_t> kPrompt = {3, 17, 42, 9, 60};

// Log-probs of `completion` after `prompt` through Model::forward (the trainer's path).
std::vector<float> training_logprobs(engine::Model& model, const std::vector<int32_t>& prompt,
                                     const std::vector<int32_t>& completion) {
  engine::testing::HostBatch hb;
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), completion.begin(), completion.end());
  hb.add_sequence(all, engine::testing::shifted_targets(all));
  auto out = model.forward(hb.batch(), /*for_backward=*/false);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  const std::vector<float> lp = engine::to_host_f32(out->logprobs);
  return std::vector<float>(lp.begin() + static_cast<long>(prompt.size()) - 1, lp.end() - 1);
}

TEST(Generate, GreedyEqualsArgmaxOfAFreshPrefillAtEveryStep) {
  auto backend = cpu_backend();
  auto model = tiny_model(*backend, /*qwen2=*/false);
  GenerateOptions o;
  o.max_tokens = 10;
  o.sampling.temperature = 0;
  o.kv_block_size = 4;  // the completion crosses several blocks
  auto g = generate(*model, kPrompt, o);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(g->ids.size(), 10u);
  EXPECT_EQ(g->finish_reason, FinishReason::kLength);
  std::vector<int32_t> prefix = kPrompt;
  for (int32_t id : g->ids) {
    auto cache = engine::KvCache::create(*backend, engine::KvCacheConfig::for_model(model->config(), 16, 2));
    ASSERT_TRUE((*cache)->add_sequence(1).ok());
    const engine::SeqId seqs[] = {1};
    const int32_t cu[] = {0, static_cast<int32_t>(prefix.size())};
    auto logits = model->forward_cached(**cache, seqs, prefix, cu);
    ASSERT_TRUE(logits.ok());
    const std::vector<float> row = engine::to_host_f32(*logits);
    EXPECT_EQ(id, std::max_element(row.begin(), row.end()) - row.begin()) << "after " << prefix.size() << " tokens";
    prefix.push_back(id);
  }
  engine::testing::expect_near_all(g->logprobs, training_logprobs(*model, kPrompt, g->ids), 1e-4f, "greedy logprobs");
}

TEST(Generate, SamplingIsReproducibleAndItsLogprobsAreTheTrainingPaths) {
  auto backend = cpu_backend();
  auto model = tiny_model(*backend, /*qwen2=*/true, 3, 0.05f);  // flat-ish: sampling varies
  GenerateOptions o;
  o.max_tokens = 12;
  o.sampling.temperature = 1.0f;
  o.seed = 5;
  auto a = generate(*model, kPrompt, o), b = generate(*model, kPrompt, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ids, b->ids);
  EXPECT_EQ(a->logprobs, b->logprobs);
  o.seed = 6;
  auto c = generate(*model, kPrompt, o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->ids, c->ids);  // 12 draws from a near-uniform 64-way distribution
  // temperature 1, top_p 1: the sampled distribution is the model's softmax
  engine::testing::expect_near_all(a->logprobs, training_logprobs(*model, kPrompt, a->ids), 1e-4f, "sampled logprobs");
}

TEST(Generate, StopsAfterAStopTokenAndAtMaxPosition) {
  auto backend = cpu_backend();
  auto model = tiny_model(*backend, /*qwen2=*/false);
  GenerateOptions o;
  o.max_tokens = 6;
  o.sampling.temperature = 0;
  auto free_run = generate(*model, kPrompt, o);
  ASSERT_TRUE(free_run.ok());
  o.stop_ids = {free_run->ids[2]};
  auto stopped = generate(*model, kPrompt, o);
  ASSERT_TRUE(stopped.ok());
  const auto first = std::find(free_run->ids.begin(), free_run->ids.end(), free_run->ids[2]);
  EXPECT_EQ(stopped->ids, std::vector<int32_t>(free_run->ids.begin(), first + 1));  // stop token kept
  EXPECT_EQ(stopped->finish_reason, FinishReason::kStop);

  engine::ModelConfig short_config = engine::testing::tiny_config(false);
  short_config.max_position = 7;
  auto small = engine::Model::create(*backend, short_config);
  ASSERT_TRUE(small.ok());
  (*small)->weights().init_random(1, 0.2f);
  o.stop_ids.clear();
  auto capped = generate(**small, kPrompt, o);  // 5 prompt tokens + 2 = max_position
  ASSERT_TRUE(capped.ok()) << capped.status().to_string();
  EXPECT_EQ(capped->ids.size(), 2u);
  EXPECT_EQ(capped->finish_reason, FinishReason::kLength);
  const std::vector<int32_t> too_long(7, 3);
  EXPECT_EQ(generate(**small, too_long, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(Generate, RejectsBadPromptsAndOptions) {
  auto backend = cpu_backend();
  auto model = tiny_model(*backend, /*qwen2=*/false);
  GenerateOptions o;
  EXPECT_EQ(generate(*model, std::vector<int32_t>{}, o).status().code(), StatusCode::kInvalidArgument);
  const Status out_of_vocab = generate(*model, std::vector<int32_t>{1, 64}, o).status();
  EXPECT_EQ(out_of_vocab.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out_of_vocab.message().find("64"), std::string::npos) << out_of_vocab.to_string();
  EXPECT_FALSE(generate(*model, std::vector<int32_t>{1, -1}, o).ok());
  o.max_tokens = 0;
  EXPECT_FALSE(generate(*model, kPrompt, o).ok());
  o.max_tokens = 4;
  o.sampling.temperature = -1;
  EXPECT_FALSE(generate(*model, kPrompt, o).ok());
  o.sampling.temperature = 1;
  o.sampling.top_p = 0;
  EXPECT_FALSE(generate(*model, kPrompt, o).ok());
}

TEST(Generate, StopTokenIdsAreTheEndOfTurnTheEosIdsAndTheChatEndTokens) {
  engine::ModelConfig c = engine::testing::tiny_config(false);
  c.eos_token_id = 5;
  EXPECT_EQ(stop_token_ids(c, nullptr, std::nullopt), std::vector<int32_t>{5});
  c.extra_eos_token_ids = {7, 5};
  EXPECT_EQ(stop_token_ids(c, nullptr, 9), (std::vector<int32_t>{9, 5, 7})) << "the end of turn first, unique";
  auto tok = engine::Tokenizer::load(std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  c.extra_eos_token_ids.clear();
  EXPECT_EQ(stop_token_ids(c, &*tok, std::nullopt), (std::vector<int32_t>{5, 0, 2}));  // <|endoftext|>, <|im_end|>
  EXPECT_EQ(stop_token_ids(c, &*tok, 2), (std::vector<int32_t>{2, 5, 0}));
  c.eos_token_id = -1;
  EXPECT_EQ(stop_token_ids(c, nullptr, std::nullopt), std::vector<int32_t>{});
}

}  // namespace
}  // namespace rlrun::rollout
