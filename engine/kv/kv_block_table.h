// kv_block_table.h - the bookkeeping half of the paged KV cache: a pool of fixed-size blocks and
// one block table per sequence.
//
// A sequence's token at position p lives in slot `table[p / block_size] * block_size +
// p % block_size` of the pool. Blocks are handed out lazily as a sequence grows (reserve), and
// all of a sequence's blocks go back to the pool at once (release), which is what continuous
// batching needs for finish, cancel and preemption-by-recompute. Nothing here touches K/V data:
// KvCache (kv_cache.h) owns the storage and uses these tables to address it.
//
// Prefix sharing: fork(src, dst, n) starts `dst` with the first n tokens of `src` (the samples of
// one prompt). The FULL blocks among them are shared, counted by reference and returned to the
// pool when their last holder releases them; a partial last block gets a fresh block for `dst`,
// whose slots the caller copies (KvCache::fork). Invariant: a shared block is full and lies
// before every holder's length, so appending never writes into it.
//
// Dropping a sequence's start: release_before(id, pos) gives up the blocks wholly before `pos`
// (a model whose every layer attends within a sliding window never reads them again:
// KvCache::trim). Their table entries become kNoBlock, so table index = position / block_size
// still holds; fork shares such holes as holes.
//
// Not thread-safe: one scheduler thread owns a table set.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace rlrun::engine {

using SeqId = int64_t;
constexpr int32_t kNoBlock = -1;  // a table entry whose block was given up (release_before)

class KvBlockTables {
 public:
  KvBlockTables(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

  // Starts an empty sequence. invalid_argument if `id` is already present.
  Status add_sequence(SeqId id);
  bool has_sequence(SeqId id) const { return seqs_.count(id) != 0; }
  // Returns every block of `id` to the pool and forgets it. not_found if unknown.
  Status release(SeqId id);

  // Starts the new, empty sequence `dst` with the first n (1 <= n <= length(src)) tokens of
  // `src`: shares their full blocks and, when n is not a multiple of block_size, takes one block
  // from the pool for the rest (returned as `copy`, whose first `tokens` slots the caller must
  // fill from `from`'s). resource_exhausted (nothing changed) when that block is not free.
  struct PartialCopy {
    int32_t from = -1, to = -1;
    int64_t tokens = 0;
  };
  Result<PartialCopy> fork(SeqId src, SeqId dst, int64_t n);
  // Blocks fork(src, dst, n) takes from the pool: 1 when n is not a multiple of block_size.
  int64_t blocks_to_fork(int64_t n) const { return n % block_size_ != 0 ? 1 : 0; }

  // Gives up the blocks of `id` that lie wholly before position `pos` (pos <= length): each loses
  // this holder and returns to the pool when it was the last. Returns how many table entries were
  // dropped. Positions before first_held(id) have no slot any more.
  int64_t release_before(SeqId id, int64_t pos);
  int64_t first_held(SeqId id) const;  // first position whose block is still held (a multiple of block_size)

  // Blocks that reserve(id, n) would have to take from the pool (0 when the last block has room).
  int64_t blocks_needed(SeqId id, int64_t n) const;
  // Makes room for `n` more tokens after the current length, all or nothing:
  // resource_exhausted (nothing allocated) when the pool is short, so a scheduler can preempt.
  Status reserve(SeqId id, int64_t n);
  // Marks `n` reserved tokens as written: length += n. Invariant: within the reservation.
  void commit(SeqId id, int64_t n);

  int64_t length(SeqId id) const;     // tokens written (committed)
  int64_t capacity(SeqId id) const;   // tokens that fit in the blocks held
  std::span<const int32_t> table(SeqId id) const;
  // Pool slot of position `pos` of `id` (pos < capacity).
  int64_t slot(SeqId id, int64_t pos) const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;  // kNoBlock for the first `dropped` entries
    int64_t dropped = 0;
    int64_t length = 0;
  };
  const Sequence& seq(SeqId id) const;
  int32_t take_free_block();

  int64_t num_blocks_;
  int64_t block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::vector<int32_t> holders_;  // per block: sequences holding it (0 when free)
  std::unordered_map<SeqId, Sequence> seqs_;
};

}  // namespace rlrun::engine
