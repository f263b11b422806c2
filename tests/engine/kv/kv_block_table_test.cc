// Paged KV cache bookkeeping: lazy block allocation, all-or-nothing reservation, release, and
// prefix sharing by fork (reference-counted full blocks, a fresh block for the partial one).
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

TEST(KvBlockTables, ForkSharesFullBlocksCopiesThePartialOneAndFreesAtTheLastHolder) {
  KvBlockTables t(/*num_blocks=*/6, /*block_size=*/4);
  ASSERT_TRUE(t.add_sequence(1).ok());
  ASSERT_TRUE(t.reserve(1, 10).ok());  // blocks 0, 1, 2
  t.commit(1, 10);
  ASSERT_TRUE(t.add_sequence(2).ok());
  EXPECT_EQ(t.blocks_to_fork(9), 1);
  EXPECT_EQ(t.blocks_to_fork(8), 0);
  auto copy = t.fork(1, 2, 9);  // 2 full blocks shared, 1 token of the third copied
  ASSERT_TRUE(copy.ok()) << copy.status().to_string();
  EXPECT_EQ(copy->from, t.table(1)[2]);
  EXPECT_EQ(copy->tokens, 1);
  EXPECT_EQ(t.length(2), 9);
  ASSERT_EQ(t.table(2).size(), 3u);
  EXPECT_EQ(t.table(2)[0], t.table(1)[0]);
  EXPECT_EQ(t.table(2)[1], t.table(1)[1]);
  EXPECT_EQ(t.table(2)[2], copy->to);
  EXPECT_NE(copy->to, copy->from);
  EXPECT_EQ(t.num_free_blocks(), 2);
  // Appending to the fork takes its own blocks; the shared ones are never written.
  ASSERT_TRUE(t.reserve(2, 4).ok());  // positions 9..12: the copied block's room, then a new block
  EXPECT_EQ(t.num_free_blocks(), 1);
  // An exact multiple of the block size shares everything and takes nothing.
  ASSERT_TRUE(t.add_sequence(3).ok());
  auto whole = t.fork(1, 3, 8);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->tokens, 0);
  EXPECT_EQ(t.num_free_blocks(), 1);
  // Releasing the source keeps the shared blocks for their other holders.
  ASSERT_TRUE(t.release(1).ok());
  EXPECT_EQ(t.num_free_blocks(), 2);  // only its own third block came back
  ASSERT_TRUE(t.release(3).ok());
  EXPECT_EQ(t.num_free_blocks(), 2);  // sequence 2 still holds the two shared blocks
  ASSERT_TRUE(t.release(2).ok());
  EXPECT_EQ(t.num_free_blocks(), 6);
}

TEST(KvBlockTables, ForkRefusesBadRequestsAndAnEmptyPoolChangingNothing) {
  KvBlockTables t(3, 4);
  ASSERT_TRUE(t.add_sequence(1).ok());
  ASSERT_TRUE(t.reserve(1, 11).ok());
  t.commit(1, 11);
  ASSERT_TRUE(t.add_sequence(2).ok());
  EXPECT_EQ(t.fork(1, 2, 12).status().code(), StatusCode::kInvalidArgument);  // beyond its length
  EXPECT_EQ(t.fork(1, 2, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.fork(1, 1, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.fork(9, 2, 4).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.fork(1, 9, 4).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.fork(1, 2, 5).status().code(), StatusCode::kResourceExhausted);  // no block for the partial one
  EXPECT_EQ(t.length(2), 0);
  EXPECT_TRUE(t.table(2).empty());
  ASSERT_TRUE(t.fork(1, 2, 8).ok());
  EXPECT_EQ(t.fork(1, 2, 4).status().code(), StatusCode::kInvalidArgument);  // no longer empty
}

// An all-sliding model gives up a sequence's start (release_before): table indices stay position /
// block_size, a block shared by a fork returns to the pool only when its last holder drops it, a
// fork shares holes as holes and refuses a partial block that is gone.
TEST(KvBlockTables, ReleaseBeforeDropsWholeBlocksAndForksKeepHoles) {
  KvBlockTables t(8, 4);
  ASSERT_TRUE(t.add_sequence(1).ok());
  ASSERT_TRUE(t.reserve(1, 14).ok());
  t.commit(1, 14);  // blocks 0..3
  EXPECT_EQ(t.release_before(1, 7), 1);  // block of positions 0..3; position 7's block stays
  EXPECT_EQ(t.first_held(1), 4);
  EXPECT_EQ(t.num_free_blocks(), 5);
  EXPECT_EQ(t.table(1)[0], kNoBlock);
  EXPECT_EQ(t.slot(1, 4), 1 * 4 + 0);
  ASSERT_TRUE(t.add_sequence(2).ok());
  ASSERT_TRUE(t.fork(1, 2, 12).ok());  // shares blocks 1, 2 and the hole
  EXPECT_EQ(t.first_held(2), 4);
  EXPECT_EQ(t.release_before(1, 12), 2);
  EXPECT_EQ(t.num_free_blocks(), 5) << "sequence 2 still holds blocks 1 and 2";
  EXPECT_EQ(t.release_before(2, 12), 2);
  EXPECT_EQ(t.num_free_blocks(), 7);
  EXPECT_EQ(t.release_before(2, 12), 0);
  ASSERT_TRUE(t.add_sequence(3).ok());
  EXPECT_EQ(t.fork(1, 3, 6).status().code(), StatusCode::kInvalidArgument);  // position 5's block is gone
  ASSERT_TRUE(t.release(1).ok());
  ASSERT_TRUE(t.release(2).ok());
  EXPECT_EQ(t.num_free_blocks(), 8);
}

}  // namespace
}  // namespace rlrun::engine
