// The batcher: TrainBatch layout (positions restart, loss mask on completions only, tokens
// conserved), and batches that the protocol decoder and the trainer's reader accept.
#include "orchestrator/data/batcher.h"

#include <gtest/gtest.h>

#include <map>

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
  for (const Seq& s : seqs) in.push_back({s.prompt, s.completion, s.logprobs, s.advantage});
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

}  // namespace
}  // namespace rlrun::orchestrator
