// Turns -> training sequences (episode_record.h): a turn that continues the previous sequence
// joins it with the environment's tokens masked; any other starts a new one. And the splice that
// keeps the model's own tokens where a prompt's text repeats them.
#include "orchestrator/env/episode_record.h"

#include <gtest/gtest.h>

#include <map>

namespace rlrun::orchestrator {
namespace {

using Ids = std::vector<int32_t>;

TEST(EpisodeSegments, ATurnThatContinuesJoinsWithTheEnvironmentsTokensMasked) {
  const std::vector<Turn> turns = {
      {{1, 2, 3}, {10, 11}, {-0.5f, -0.25f}, 4},
      {{1, 2, 3, 10, 11, 7, 8}, {12, 13}, {-1.0f, -2.0f}, 5},  // + environment tokens 7, 8
  };
  const std::vector<EpisodeSegment> s = episode_segments(turns);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].prompt, (Ids{1, 2, 3}));
  EXPECT_EQ(s[0].completion, (Ids{10, 11, 7, 8, 12, 13}));
  EXPECT_EQ(s[0].mask, (std::vector<uint8_t>{1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(s[0].logprobs, (std::vector<float>{-0.5f, -0.25f, 0.0f, 0.0f, -1.0f, -2.0f}));
}

TEST(EpisodeSegments, ATurnThatRewritesHistoryStartsANewSequence) {
  const std::vector<Turn> turns = {
      {{1, 2, 3}, {10, 11}, {-0.5f, -0.5f}, 0},
      {{1, 2, 3, 10, 9, 7}, {12}, {-1.0f}, 0},   // 9 where the model wrote 11: not a continuation
      {{1, 2, 3, 10, 9, 7, 12, 6}, {14}, {-1.0f}, 0},  // continues the second
      {{5}, {}, {}, 0},                          // nothing sampled: nothing to train
  };
  const std::vector<EpisodeSegment> s = episode_segments(turns);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].completion, (Ids{10, 11}));
  EXPECT_EQ(s[0].mask, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(s[1].prompt, (Ids{1, 2, 3, 10, 9, 7}));
  EXPECT_EQ(s[1].completion, (Ids{12, 6, 14}));
  EXPECT_EQ(s[1].mask, (std::vector<uint8_t>{1, 0, 1}));
}

// A toy tokenizer: each id is a string; encoding is greedy longest match, so "ab" is one token
// although the model may have written it as "a" + "b".
const std::map<int32_t, std::string> kVocab = {{1, "a"}, {2, "b"}, {3, "ab"}, {4, "!"}, {5, "c"}};

std::optional<std::string> decode(const Ids& ids) {
  std::string s;
  for (int32_t id : ids) {
    auto it = kVocab.find(id);
    if (it == kVocab.end()) return std::nullopt;
    s += it->second;
  }
  return s;
}

Ids encode(const std::string& text) {
  Ids out;
  for (size_t i = 0; i < text.size();) {
    int32_t best = 0;
    size_t len = 0;
    for (const auto& [id, piece] : kVocab)
      if (piece.size() > len && text.compare(i, piece.size(), piece) == 0) best = id, len = piece.size();
    if (len == 0) return {};
    out.push_back(best);
    i += len;
  }
  return out;
}

TEST(SplicePrefix, TheModelsOwnTokensReplaceTheirReTokenisation) {
  const Ids recorded = {5, 1, 2};       // "c" then the model wrote "a" "b"
  const Ids retokenised = encode("cab!");  // {5, 3, 4}: "ab" as one token
  ASSERT_EQ(retokenised, (Ids{5, 3, 4}));
  const std::optional<Ids> exact = splice_recorded_prefix(recorded, retokenised, decode, encode);
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(*exact, (Ids{5, 1, 2, 4}));
}

TEST(SplicePrefix, NothingToDoOrTextsThatDisagree) {
  EXPECT_FALSE(splice_recorded_prefix({5, 1}, {5, 1, 4}, decode, encode));  // already exact
  EXPECT_FALSE(splice_recorded_prefix({5, 1, 2}, encode("cb!"), decode, encode));  // history rewritten
  EXPECT_FALSE(splice_recorded_prefix({5, 99}, encode("cab"), decode, encode));   // undecodable
  EXPECT_FALSE(splice_recorded_prefix({}, encode("cab"), decode, encode));
  EXPECT_FALSE(splice_recorded_prefix({5, 1, 2}, encode("cab"), decode, encode));  // nothing after it
}

}  // namespace
}  // namespace rlrun::orchestrator
