#include "orchestrator/data/packer.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace rlrun::orchestrator {
namespace {

// The invariants every plan must satisfy, whatever the input.
void check_invariants(const std::vector<int64_t>& lengths, const PackOptions& o, const PackPlan& plan) {
  ASSERT_EQ(static_cast<int>(plan.micro_batches.size()), o.num_ranks);
  std::multiset<int> seen;
  int64_t tokens = 0;
  for (int r = 0; r < o.num_ranks; ++r) {
    // every rank has the same number of micro-batches, each of micro_batch_rows rows
    ASSERT_EQ(plan.micro_batches[r].size(), plan.micro_batches[0].size());
    for (const auto& mb : plan.micro_batches[r]) {
      ASSERT_EQ(static_cast<int>(mb.size()), o.micro_batch_rows);
      for (const PackedRow& row : mb) {
        int64_t sum = 0;
        for (int i : row.sequences) {
          sum += lengths[i];
          seen.insert(i);
        }
        EXPECT_EQ(sum, row.tokens);
        EXPECT_LE(row.tokens, o.seq_len);          // never exceeds seq_len
        EXPECT_LE(row.padded_tokens, o.seq_len);
        EXPECT_GE(row.padded_tokens, row.tokens);
        if (row.padded_tokens < o.seq_len) {
          EXPECT_EQ(row.padded_tokens % o.pad_to_multiple_of, 0);
        }
        tokens += row.tokens;
      }
    }
  }
  // every sequence appears exactly once, unless dropped for being too long (tokens conserved)
  std::set<int> dropped(plan.dropped_too_long.begin(), plan.dropped_too_long.end());
  int64_t expected_tokens = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > o.seq_len) {
      EXPECT_TRUE(dropped.count(static_cast<int>(i))) << "sequence " << i << " too long but not reported";
      EXPECT_EQ(seen.count(static_cast<int>(i)), 0u);
    } else if (lengths[i] > 0) {
      EXPECT_EQ(seen.count(static_cast<int>(i)), 1u) << "sequence " << i;
      expected_tokens += lengths[i];
    }
  }
  EXPECT_EQ(tokens, expected_tokens);
  EXPECT_EQ(plan.tokens, expected_tokens);
}

TEST(Packer, FirstFitDecreasingFillsRows) {
  PackOptions o;
  o.seq_len = 10;
  PackPlan plan = pack_sequences({6, 5, 4, 3, 2}, o);  // FFD: [6,4] [5,3,2]
  check_invariants({6, 5, 4, 3, 2}, o, plan);
  ASSERT_EQ(plan.micro_batches_per_rank(), 2);
  EXPECT_EQ(plan.micro_batches[0][0][0].sequences, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.micro_batches[0][1][0].sequences, (std::vector<int>{1, 3, 4}));
}

TEST(Packer, TooLongSequencesAreDroppedAndReported) {
  PackOptions o;
  o.seq_len = 8;
  std::vector<int64_t> lengths = {9, 3, 20, 8};
  PackPlan plan = pack_sequences(lengths, o);
  EXPECT_EQ(plan.dropped_too_long, (std::vector<int>{0, 2}));
  check_invariants(lengths, o, plan);
}

TEST(Packer, PadsRowsToMultipleButNotBeyondSeqLen) {
  PackOptions o;
  o.seq_len = 12;
  o.pad_to_multiple_of = 8;
  PackPlan plan = pack_sequences({5, 11}, o);
  check_invariants({5, 11}, o, plan);
  EXPECT_EQ(plan.padded_tokens, 8 + 12);
}

TEST(Packer, RanksGetEqualMicroBatchCountsAndBalancedTokens) {
  PackOptions o;
  o.seq_len = 16;
  o.num_ranks = 2;
  o.micro_batch_rows = 2;
  std::vector<int64_t> lengths = {16, 16, 16, 8, 8};  // 4 rows: 16,16,16,16 (8+8)
  PackPlan plan = pack_sequences(lengths, o);
  check_invariants(lengths, o, plan);
  EXPECT_EQ(plan.micro_batches_per_rank(), 1);
  EXPECT_EQ(plan.rank_tokens(0), 32);
  EXPECT_EQ(plan.rank_tokens(1), 32);
}

TEST(Packer, OddRowCountGivesPaddingRow) {
  PackOptions o;
  o.seq_len = 10;
  o.num_ranks = 2;
  std::vector<int64_t> lengths = {10, 10, 10};
  PackPlan plan = pack_sequences(lengths, o);
  check_invariants(lengths, o, plan);
  ASSERT_EQ(plan.micro_batches_per_rank(), 2);
  int padding_rows = 0;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank)
      for (const PackedRow& row : mb) padding_rows += row.sequences.empty();
  EXPECT_EQ(padding_rows, 1);
}

// number_of_minibatches slices each rank's micro-batches: a batch that fits in fewer rows than
// that is packed into shorter rows, never shorter than its longest sequence.
TEST(Packer, MinibatchesGetMicroBatchesOfShorterRows) {
  PackOptions o;
  o.seq_len = 100;
  o.min_micro_batches = 4;
  const std::vector<int64_t> eight(8, 5);
  PackPlan plan = pack_sequences(eight, o);
  check_invariants(eight, o, plan);
  ASSERT_EQ(plan.micro_batches_per_rank(), 4);
  for (const auto& mb : plan.micro_batches[0]) EXPECT_EQ(mb[0].tokens, 10);

  o.num_ranks = 2;
  o.micro_batch_rows = 2;
  o.min_micro_batches = 2;
  const std::vector<int64_t> mixed = {30, 20, 9, 8, 7, 6, 5, 4, 3, 2};
  plan = pack_sequences(mixed, o);
  check_invariants(mixed, o, plan);
  EXPECT_EQ(plan.micro_batches_per_rank(), 2);
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank)
      for (const PackedRow& row : mb) EXPECT_GT(row.tokens, 0) << "every row of the 8 has tokens";

  o = PackOptions{};
  o.seq_len = 100;
  o.min_micro_batches = 4;
  const std::vector<int64_t> three = {5, 5, 5};  // one sequence per row is as far as it goes
  plan = pack_sequences(three, o);
  check_invariants(three, o, plan);
  EXPECT_EQ(plan.micro_batches_per_rank(), 3);
}

// Two rows for two ranks: first-fit would give one a full row and the other the rest; the
// sequences are shared out evenly instead.
TEST(Packer, RanksGetEvenRowsWhenFirstFitGivesJustEnough) {
  PackOptions o;
  o.seq_len = 100;
  o.num_ranks = 2;
  const std::vector<int64_t> lengths = {30, 30, 30, 10, 10, 10};  // first-fit: [30 30 30 10] [10 10]
  PackPlan plan = pack_sequences(lengths, o);
  check_invariants(lengths, o, plan);
  ASSERT_EQ(plan.micro_batches_per_rank(), 1);
  EXPECT_EQ(plan.rank_tokens(0), 60);
  EXPECT_EQ(plan.rank_tokens(1), 60);
}

TEST(Packer, RandomInputsKeepEveryInvariant) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 500; ++trial) {
    PackOptions o;
    o.seq_len = 1 + rng() % 300;
    o.pad_to_multiple_of = 1 + rng() % 16;
    o.num_ranks = 1 + rng() % 4;
    o.micro_batch_rows = 1 + rng() % 3;
    o.min_micro_batches = 1 + rng() % 4;
    std::vector<int64_t> lengths(rng() % 60);
    for (auto& l : lengths) l = rng() % (o.seq_len + o.seq_len / 4 + 2);
    PackPlan plan = pack_sequences(lengths, o);
    check_invariants(lengths, o, plan);
    // balance of the work each rank computes (padded tokens): within one full row
    int64_t lo = INT64_MAX, hi = 0;
    for (int r = 0; r < o.num_ranks; ++r) {
      int64_t padded = 0;
      for (const auto& mb : plan.micro_batches[r])
        for (const PackedRow& row : mb) padded += row.padded_tokens;
      lo = std::min(lo, padded);
      hi = std::max(hi, padded);
    }
    EXPECT_LE(hi - lo, o.seq_len) << "trial " << trial;
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
