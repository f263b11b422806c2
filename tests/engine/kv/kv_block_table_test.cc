// Paged KV cache bookkeeping: lazy block allocation, all-or-nothing reservation, release.
#include "engine/kv/kv_block_table.h"

#include <gtest/gtest.h>

#include <set>

namespace rlrun::engine {
namespace {

TEST(KvBlockTables, AllocatesBlocksLazilyAndMapsSlots) {
  KvBlockTables t(/*num_blocks=*/4, /*block_size=*/3);
  ASSERT_TRUE(t.add_sequence(7).ok());
  EXPECT_EQ(t.blocks_needed(7, 1), 1);
  EXPECT_EQ(t.blocks_needed(7, 4), 2);
  ASSERT_TRUE(t.reserve(7, 4).ok());
  EXPECT_EQ(t.num_free_blocks(), 2);
  EXPECT_EQ(t.capacity(7), 6);
  EXPECT_EQ(t.length(7), 0);
  t.commit(7, 4);
  EXPECT_EQ(t.length(7), 4);
  EXPECT_EQ(t.blocks_needed(7, 2), 0);  // the second block still has room for 2
  EXPECT_EQ(t.blocks_needed(7, 3), 1);
  // Blocks 0 then 1: position 4 is offset 1 of the second block.
  EXPECT_EQ(t.slot(7, 0), 0);
  EXPECT_EQ(t.slot(7, 4), 1 * 3 + 1);
}

TEST(KvBlockTables, ReserveIsAllOrNothing) {
  KvBlockTables t(3, 2);
  ASSERT_TRUE(t.add_sequence(1).ok());
  ASSERT_TRUE(t.add_sequence(2).ok());
  ASSERT_TRUE(t.reserve(1, 3).ok());  // 2 blocks
  Status s = t.reserve(2, 3);         // needs 2, 1 free
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("preempt"), std::string::npos);
  EXPECT_EQ(t.num_free_blocks(), 1);
  EXPECT_EQ(t.capacity(2), 0);
  ASSERT_TRUE(t.reserve(2, 2).ok());
  EXPECT_EQ(t.num_free_blocks(), 0);
}

TEST(KvBlockTables, ReleaseReturnsEveryBlockAndTablesNeverShare) {
  KvBlockTables t(6, 4);
  for (SeqId id : {10, 11, 12}) {
    ASSERT_TRUE(t.add_sequence(id).ok());
    ASSERT_TRUE(t.reserve(id, 5).ok());
  }
  std::set<int32_t> seen;
  for (SeqId id : {10, 11, 12})
    for (int32_t b : t.table(id)) EXPECT_TRUE(seen.insert(b).second) << "block " << b << " shared";
  EXPECT_EQ(t.num_free_blocks(), 0);
  ASSERT_TRUE(t.release(11).ok());
  EXPECT_EQ(t.num_free_blocks(), 2);
  EXPECT_FALSE(t.has_sequence(11));
  EXPECT_EQ(t.release(11).code(), StatusCode::kNotFound);
  EXPECT_EQ(t.add_sequence(10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.reserve(99, 1).code(), StatusCode::kNotFound);
  ASSERT_TRUE(t.add_sequence(13).ok());
  ASSERT_TRUE(t.reserve(13, 8).ok());  // reuses the two freed blocks
  EXPECT_EQ(t.num_free_blocks(), 0);
}

}  // namespace
}  // namespace rlrun::engine
