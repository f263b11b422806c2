// The batcher: TrainBatch layout (positions restart, loss mask on completions only, tokens
// conserved), batches that the protocol decoder and the trainer's reader accept, and shared
// prompts (one copy per group, the same training step as the repeated layout on the real decoder).
#include "orchestrator/data/batcher.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <random>

#include "engine/model/model.h"
#include "tests/engine/model/model_test_util.h"
#include "trainer/model_adapter.h"
#include "trainer/train_step.h"
#include "trainer/trainer_inputs.h"

namespace rlrun::orchestrator {
namespace {

struct Seq {
  std::vector<int32_t> prompt, completion;
  std::vector<float> logprobs;
  float advantage;
};

std::vector<Seq> make_sequences() {
  std::vector<Seq> s;
  for (int i = 0; i < 7; ++i) {
    Seq q;
    for (int t = 0; t < 3 + i % 3; ++t) q.prompt.push_back(100 + i);
    for (int t = 0; t < 2 + i; ++t) {
      q.completion.push_back(200 + i);
      q.logprobs.push_back(-0.1f * static_cast<float>(i + 1));
    }
    q.advantage = 0.5f * static_cast<float>(i) - 1.0f;
    s.push_back(q);
  }
  Seq too_long;
  too_long.prompt.assign(30, 7);
  too_long.completion.assign(10, 8);
  too_long.logprobs.assign(10, -1.0f);
  too_long.advantage = 1.0f;
  s.push_back(too_long);
  return s;
}

TEST(Batcher, LayoutRestartsPositionsMasksCompletionsAndConservesTokens) {
  const std::vector<Seq> seqs = make_sequences();
  std::vector<TrainSequence> in;
  for (const Seq& s : seqs) in.push_back({.prompt = s.prompt, .completion = s.completion, .logprobs = s.logprobs, .advantage = s.advantage});
  PackOptions options{/*seq_len=*/24, /*pad_to_multiple_of=*/4, /*num_ranks=*/2, /*micro_batch_rows=*/1};
  const BatchBuild b = build_train_batches(in, options, 5);
  ASSERT_EQ(b.dropped_too_long, std::vector<int>{7});
  ASSERT_EQ(b.per_rank.size(), 2u);
  int64_t expect_tokens = 0, expect_loss = 0;
  for (size_t i = 0; i + 1 < seqs.size(); ++i) {
    expect_tokens += static_cast<int64_t>(seqs[i].prompt.size() + seqs[i].completion.size());
    expect_loss += static_cast<int64_t>(seqs[i].completion.size());
  }
  EXPECT_EQ(b.tokens, expect_tokens);
  EXPECT_EQ(b.loss_tokens, expect_loss);

  int64_t seen_tokens = 0, seen_loss = 0;
  std::map<int32_t, int> completion_count;  // id -> completion tokens seen
  for (const TrainBatch& t : b.per_rank) {
    EXPECT_EQ(t.step, 5u);
    EXPECT_EQ(t.row_len % 4, 0u);
    EXPECT_LE(t.row_len, 24u);
    EXPECT_EQ(t.num_micro_batches, b.per_rank[0].num_micro_batches);
    EXPECT_EQ(t.loss_token_count, static_cast<uint64_t>(expect_loss));
    ASSERT_EQ(t.input_ids.size(), size_t{t.num_rows} * t.row_len);
    for (size_t s = 0; s + 1 < t.cu_seqlens.size(); ++s) {
      const int32_t begin = t.cu_seqlens[s], end = t.cu_seqlens[s + 1];
      ASSERT_LT(begin, end);
      for (int32_t k = begin; k < end; ++k) {
        EXPECT_EQ(t.position_ids[k], k - begin) << "positions restart per sequence";
        if (t.loss_mask[k]) {
          ++seen_loss;
          EXPECT_GE(t.input_ids[k], 200) << "loss only on completion tokens";
          ++completion_count[t.input_ids[k]];
          const int i = t.input_ids[k] - 200;
          EXPECT_FLOAT_EQ(t.rollout_logprobs[k], -0.1f * static_cast<float>(i + 1));
          EXPECT_FLOAT_EQ(t.advantages[k], 0.5f * static_cast<float>(i) - 1.0f);
        } else {
          EXPECT_LT(t.input_ids[k], 200);
          EXPECT_EQ(t.rollout_logprobs[k], 0.0f);
        }
        if (t.input_ids[k] != 0) ++seen_tokens;
      }
    }
    // The wire decoder's and the trainer's checks accept it.
    Result<Message> decoded = decode(encode(t));
    ASSERT_TRUE(decoded.ok()) << decoded.status().message();
    Result<std::vector<trainer::MicroBatch>> micro = trainer::micro_batches_from_train_batch(t);
    ASSERT_TRUE(micro.ok()) << micro.status().message();
  }
  EXPECT_EQ(seen_tokens, expect_tokens) << "every packed token appears once";
  EXPECT_EQ(seen_loss, expect_loss);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(completion_count[200 + i], 2 + i) << "sequence " << i << " is whole";
}

// Three groups: prompt A with 4 samples, prompt B with 3, prompt C with 1 (a plain sequence).
std::vector<Seq> grouped_sequences() {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(1, 63);
  auto ids = [&](size_t n) {
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = tok(rng);
    return v;
  };
  std::vector<Seq> out;
  const std::vector<std::pair<size_t, int>> groups = {{7, 4}, {5, 3}, {6, 1}};  // (prompt length, samples)
  float adv = -1.0f;
  for (const auto& [plen, samples] : groups) {
    const std::vector<int32_t> prompt = ids(plen);
    for (int k = 0; k < samples; ++k) {
      Seq q{prompt, ids(2 + static_cast<size_t>(k)), {}, adv};
      for (size_t t = 0; t < q.completion.size(); ++t) q.logprobs.push_back(-0.5f - 0.1f * static_cast<float>(t));
      out.push_back(q);
      adv += 0.45f;
    }
  }
  return out;
}

std::vector<TrainSequence> views(const std::vector<Seq>& seqs) {
  std::vector<TrainSequence> in;
  for (const Seq& s : seqs) in.push_back({.prompt = s.prompt, .completion = s.completion, .logprobs = s.logprobs, .advantage = s.advantage});
  return in;
}

TEST(Batcher, AnEpisodesEnvironmentTokensAreInTheSequenceButNotTrained) {
  // prompt 1 2 | policy 10 11 | environment 7 8 | policy 12; and a plain sequence beside it
  const std::vector<int32_t> prompt = {1, 2}, completion = {10, 11, 7, 8, 12}, plain_prompt = {3}, plain = {20};
  const std::vector<float> logprobs = {-0.5f, -0.5f, 0.0f, 0.0f, -0.25f}, plain_logprobs = {-1.0f};
  const std::vector<uint8_t> mask = {1, 1, 0, 0, 1};
  const std::vector<TrainSequence> in = {{prompt, completion, logprobs, 2.0f, mask},
                                         {plain_prompt, plain, plain_logprobs, -1.0f, {}}};
  for (bool share : {false, true}) {
    PackOptions options{/*seq_len=*/16, /*pad_to_multiple_of=*/1, /*num_ranks=*/1, /*micro_batch_rows=*/1, share};
    const BatchBuild b = build_train_batches(in, options, 1);
    ASSERT_EQ(b.per_rank.size(), 1u);
    EXPECT_EQ(b.loss_tokens, 3 + 1);  // the environment's two tokens are not counted
    const TrainBatch& t = b.per_rank[0];
    std::map<int32_t, uint8_t> trained;  // token -> its loss mask (every token id is distinct)
    for (size_t i = 0; i < t.input_ids.size(); ++i)
      if (t.input_ids[i] != 0) trained[t.input_ids[i]] = t.loss_mask[i];
    EXPECT_EQ(trained, (std::map<int32_t, uint8_t>{{1, 0}, {2, 0}, {10, 1}, {11, 1}, {7, 0}, {8, 0}, {12, 1}, {3, 0}, {20, 1}}));
    EXPECT_EQ(t.loss_token_count, 4u);
  }
}

TEST(Batcher, SharedPromptsAreWrittenOnceBeforeTheirSamples) {
  const std::vector<Seq> seqs = grouped_sequences();
  const std::vector<TrainSequence> in = views(seqs);
  PackOptions options{/*seq_len=*/64, /*pad_to_multiple_of=*/1, /*num_ranks=*/1, /*micro_batch_rows=*/1};
  const BatchBuild plain = build_train_batches(in, options, 1);
  options.share_prompts = true;
  const BatchBuild shared = build_train_batches(in, options, 1);
  EXPECT_EQ(shared.loss_tokens, plain.loss_tokens);
  EXPECT_EQ(shared.shared_prompt_tokens, 3 * 6 + 2 * 4);  // (samples - 1) x (prompt - 1) per group
  EXPECT_EQ(shared.tokens, plain.tokens - shared.shared_prompt_tokens);
  EXPECT_TRUE(plain.per_rank[0].prefix_of.empty());
  const TrainBatch& t = shared.per_rank[0];
  ASSERT_EQ(t.prefix_of.size() + 1, t.cu_seqlens.size());
  int continuations = 0;
  for (size_t s = 0; s < t.prefix_of.size(); ++s) {
    const int32_t p = t.prefix_of[s];
    if (p < 0) continue;
    ++continuations;
    ASSERT_LT(static_cast<size_t>(p), s);
    EXPECT_EQ(t.position_ids[t.cu_seqlens[s]], t.position_ids[t.cu_seqlens[p + 1] - 1] + 1) << "positions go on";
    for (int32_t k = t.cu_seqlens[p]; k < t.cu_seqlens[p + 1]; ++k) EXPECT_EQ(t.loss_mask[k], 0) << "a prefix trains nothing";
    EXPECT_EQ(t.loss_mask[t.cu_seqlens[s]], 0) << "the prompt's last token starts each continuation, untrained";
  }
  EXPECT_EQ(continuations, 4 + 3);
  Result<Message> decoded = decode(encode(t));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(std::get<TrainBatch>(decoded->payload).prefix_of, t.prefix_of);
  auto micro = trainer::micro_batches_from_train_batch(t);
  ASSERT_TRUE(micro.ok()) << micro.status().message();

  // A group longer than seq_len is split into units that each carry the prompt.
  options.seq_len = 16;
  const BatchBuild split = build_train_batches(in, options, 1);
  EXPECT_TRUE(split.dropped_too_long.empty());
  EXPECT_EQ(split.loss_tokens, plain.loss_tokens);
  EXPECT_LT(split.shared_prompt_tokens, shared.shared_prompt_tokens);
}

TEST(Batcher, AContinuationOfAnotherMicroBatchIsAProtocolError) {
  const std::vector<Seq> seqs = grouped_sequences();
  PackOptions options{64, 1, 1, 1, /*share_prompts=*/true};
  TrainBatch t = build_train_batches(views(seqs), options, 1).per_rank[0];
  std::vector<int32_t> prefix_of = t.prefix_of.to_vector();
  TrainBatch bad = t;
  prefix_of.back() = static_cast<int32_t>(prefix_of.size());  // not an earlier segment
  bad.prefix_of = prefix_of;
  EXPECT_EQ(trainer::micro_batches_from_train_batch(bad).status().code(), StatusCode::kProtocol);
  prefix_of.pop_back();  // one short
  bad.prefix_of = prefix_of;
  EXPECT_EQ(trainer::micro_batches_from_train_batch(bad).status().code(), StatusCode::kProtocol);
}

// The same samples, packed with and without shared prompts, give the same step on the real
// decoder (two micro-batches, two ranks' worth of rows on one rank).
// kl_reference_on: rollout. The KL reference's log-probs travel with their tokens (in the
// batch, through the wire, shifted into the trainer's micro-batches like the rollout log-probs)
// when every sequence of a rank's batch has them; one sequence without leaves the batch without,
// for the trainer to score.
TEST(Batcher, ReferenceLogprobsTravelWithTheirTokensWhenEverySequenceHasThem) {
  const std::vector<Seq> seqs = grouped_sequences();
  std::vector<std::vector<float>> ref(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    for (float lp : seqs[i].logprobs) ref[i].push_back(2.0f * lp - 0.01f * static_cast<float>(i));
  std::vector<TrainSequence> in = views(seqs);
  for (size_t i = 0; i < in.size(); ++i) in[i].ref_logprobs = ref[i];
  for (bool share : {false, true}) {
    PackOptions options{/*seq_len=*/40, 1, 1, /*micro_batch_rows=*/1, share};
    const BatchBuild b = build_train_batches(in, options, 1);
    const TrainBatch& t = b.per_rank.at(0);
    ASSERT_EQ(t.ref_logprobs.size(), t.input_ids.size());
    // Every trained token carries its sequence's value; nothing else does.
    std::multiset<float> want, got;
    for (const auto& r : ref) want.insert(r.begin(), r.end());
    for (size_t k = 0; k < t.input_ids.size(); ++k) {
      if (t.loss_mask[k]) got.insert(t.ref_logprobs[k]);
      else EXPECT_EQ(t.ref_logprobs[k], 0.0f);
    }
    EXPECT_EQ(got, want);
    Result<Message> decoded = decode(encode(t));
    ASSERT_TRUE(decoded.ok()) << decoded.status().message();
    EXPECT_EQ(std::get<TrainBatch>(decoded->payload).ref_logprobs, t.ref_logprobs);
    auto micro = trainer::micro_batches_from_train_batch(t);
    ASSERT_TRUE(micro.ok()) << micro.status().message();
    for (const trainer::MicroBatch& mb : *micro) {
      ASSERT_EQ(mb.ref_logprobs.size(), mb.input_ids.size());
      for (size_t k = 0; k < mb.input_ids.size(); ++k) {
        if (!mb.loss_mask[k]) continue;
        // ref = 2 x rollout - 0.01 x sequence: the same token's pair (a shift by one token would be
        // 0.2 off: consecutive rollout log-probs differ by 0.1)
        const float r = mb.ref_logprobs[k], l = mb.rollout_logprobs[k];
        EXPECT_GE(2.0f * l - r, -1e-5f);
        EXPECT_LE(2.0f * l - r, 0.01f * static_cast<float>(seqs.size()) + 1e-5f);
      }
    }
  }
  in[3].ref_logprobs = {};  // one sample the rollout worker could not score
  PackOptions options{/*seq_len=*/40, 1, 1, /*micro_batch_rows=*/1, true};
  const BatchBuild b = build_train_batches(in, options, 1);
  EXPECT_TRUE(b.per_rank.at(0).ref_logprobs.empty());
  auto micro = trainer::micro_batches_from_train_batch(b.per_rank.at(0));
  ASSERT_TRUE(micro.ok());
  for (const trainer::MicroBatch& mb : *micro) EXPECT_TRUE(mb.ref_logprobs.empty());
}

TEST(Batcher, SharedPromptsTrainLikeRepeatedOnes) {
  const std::vector<Seq> seqs = grouped_sequences();
  auto step = [&](bool share, double* loss) {
    PackOptions options{/*seq_len=*/40, 1, 1, /*micro_batch_rows=*/1, share};
    const BatchBuild build = build_train_batches(views(seqs), options, 1);
    EXPECT_GE(build.per_rank[0].num_micro_batches, 2u);
    auto micro = trainer::micro_batches_from_train_batch(build.per_rank[0]);
    EXPECT_TRUE(micro.ok()) << micro.status().message();
    auto backend = engine::testing::cpu_backend();
    auto model = engine::testing::tiny_model(*backend, /*qwen2=*/true, 9, 0.3f);
    trainer::ModelAdapter adapter(*model);
    trainer::TrainerOptions o;
    o.learning_rate = 1e-2;
    o.optimizer.adam_eps = 1.0;  // nearly linear in the gradient: comparing weights compares gradients
    o.loss.entropy_coef = 0.01;
    auto tr = trainer::Trainer::create(o, adapter, nullptr);
    EXPECT_TRUE(tr.ok());
    auto report = (*tr)->train(*micro);
    EXPECT_TRUE(report.ok()) << report.status().message();
    *loss = report->minibatches.at(0).loss.loss;
    return engine::to_host_f32(adapter.params_flat());
  };
  double loss_plain = 0, loss_shared = 0;
  const std::vector<float> plain = step(false, &loss_plain), shared = step(true, &loss_shared);
  EXPECT_NEAR(loss_shared, loss_plain, 1e-5);
  ASSERT_EQ(plain.size(), shared.size());
  double moved = 0, worst = 0;
  auto backend = engine::testing::cpu_backend();
  auto fresh = engine::testing::tiny_model(*backend, /*qwen2=*/true, 9, 0.3f);
  const std::vector<float> start = engine::to_host_f32(fresh->weights().master_flat());
  for (size_t i = 0; i < plain.size(); ++i) {
    moved = std::max(moved, double(std::abs(plain[i] - start[i])));
    worst = std::max(worst, double(std::abs(plain[i] - shared[i])));
  }
  EXPECT_GT(moved, 1e-4) << "the step moved the weights";
  EXPECT_LT(worst, 1e-6) << "shared and repeated prompts give the same update";
}

}  // namespace
}  // namespace rlrun::orchestrator
