#include "engine/kv/kv_block_table.h"

#include <algorithm>

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::engine {

KvBlockTables::KvBlockTables(int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  RLRUN_CHECK(num_blocks > 0 && block_size > 0, "kv cache needs at least one block of one token");
  RLRUN_CHECK(num_blocks * block_size < (int64_t{1} << 31), "kv cache slots must fit in int32");
  free_.reserve(num_blocks);
  holders_.assign(static_cast<size_t>(num_blocks), 0);
  // Pushed in reverse so block 0 is handed out first (deterministic layouts in tests).
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

Status KvBlockTables::add_sequence(SeqId id) {
  if (seqs_.count(id)) return invalid_argument(str("kv cache: sequence ", id, " already exists"));
  seqs_.emplace(id, Sequence{});
  return {};
}

Status KvBlockTables::release(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return not_found(str("kv cache: no sequence ", id, " to release"));
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b)
    if (*b != kNoBlock && --holders_[*b] == 0) free_.push_back(*b);
  seqs_.erase(it);
  return {};
}

int32_t KvBlockTables::take_free_block() {
  const int32_t b = free_.back();
  free_.pop_back();
  holders_[b] = 1;
  return b;
}

Result<KvBlockTables::PartialCopy> KvBlockTables::fork(SeqId src, SeqId dst, int64_t n) {
  if (!has_sequence(src)) return not_found(str("kv cache: no sequence ", src, " to fork from"));
  if (!has_sequence(dst)) return not_found(str("kv cache: no sequence ", dst, " to fork into"));
  if (src == dst) return invalid_argument(str("kv cache: cannot fork sequence ", src, " into itself"));
  Sequence& d = seqs_.at(dst);
  if (d.length != 0 || !d.blocks.empty())
    return invalid_argument(str("kv cache: fork into sequence ", dst, ", which is not empty"));
  const Sequence& s = seqs_.at(src);
  if (n < 1 || n > s.length)
    return invalid_argument(str("kv cache: cannot fork ", n, " tokens of sequence ", src, ", which holds ", s.length));
  if (n % block_size_ != 0 && s.blocks[n / block_size_] == kNoBlock)
    return invalid_argument(str("kv cache: cannot fork ", n, " tokens of sequence ", src,
                                ": the block of position ", n - 1, " was released"));
  if (blocks_to_fork(n) > num_free_blocks())
    return resource_exhausted(str("kv cache: forking sequence ", src, " needs a free block; none is"));
  const int64_t full = n / block_size_;
  for (int64_t i = 0; i < full; ++i) {
    d.blocks.push_back(s.blocks[i]);
    if (s.blocks[i] != kNoBlock) ++holders_[s.blocks[i]];
  }
  d.dropped = std::min(s.dropped, full);
  PartialCopy copy;
  if (n % block_size_ != 0) {
    copy = {s.blocks[full], take_free_block(), n % block_size_};
    d.blocks.push_back(copy.to);
  }
  d.length = n;
  return copy;
}

const KvBlockTables::Sequence& KvBlockTables::seq(SeqId id) const {
  auto it = seqs_.find(id);
  RLRUN_CHECK(it != seqs_.end(), str("kv cache: unknown sequence ", id));
  return it->second;
}

int64_t KvBlockTables::release_before(SeqId id, int64_t pos) {
  auto it = seqs_.find(id);
  RLRUN_CHECK(it != seqs_.end(), str("kv cache: unknown sequence ", id));
  Sequence& s = it->second;
  RLRUN_CHECK(pos <= s.length, "kv cache: release_before past the sequence's length");
  const int64_t keep_from = std::max<int64_t>(pos, 0) / block_size_;  // the block of `pos` stays
  int64_t dropped = 0;
  for (; s.dropped < keep_from; ++s.dropped, ++dropped) {
    int32_t& b = s.blocks[s.dropped];
    if (b != kNoBlock && --holders_[b] == 0) free_.push_back(b);
    b = kNoBlock;
  }
  return dropped;
}

int64_t KvBlockTables::first_held(SeqId id) const { return seq(id).dropped * block_size_; }

int64_t KvBlockTables::blocks_needed(SeqId id, int64_t n) const {
  const Sequence& s = seq(id);
  const int64_t need_tokens = s.length + n;
  const int64_t need_blocks = (need_tokens + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(s.blocks.size());
  return need_blocks > have ? need_blocks - have : 0;
}

Status KvBlockTables::reserve(SeqId id, int64_t n) {
  if (!has_sequence(id)) return not_found(str("kv cache: no sequence ", id, " to grow"));
  if (n < 0) return invalid_argument(str("kv cache: cannot reserve ", n, " tokens"));
  const int64_t need = blocks_needed(id, n);
  if (need > num_free_blocks()) {
    return resource_exhausted(str("kv cache: sequence ", id, " needs ", need, " more blocks of ",
                                  block_size_, " tokens but only ", num_free_blocks(),
                                  " are free; preempt or finish a sequence first"));
  }
  Sequence& s = seqs_.at(id);
  for (int64_t i = 0; i < need; ++i) s.blocks.push_back(take_free_block());
  return {};
}

void KvBlockTables::commit(SeqId id, int64_t n) {
  Sequence& s = seqs_.at(id);
  RLRUN_CHECK(n >= 0 && s.length + n <= capacity(id), "kv cache: commit beyond the reservation");
  s.length += n;
}

int64_t KvBlockTables::length(SeqId id) const { return seq(id).length; }

int64_t KvBlockTables::capacity(SeqId id) const {
  return static_cast<int64_t>(seq(id).blocks.size()) * block_size_;
}

std::span<const int32_t> KvBlockTables::table(SeqId id) const { return seq(id).blocks; }

int64_t KvBlockTables::slot(SeqId id, int64_t pos) const {
  const Sequence& s = seq(id);
  RLRUN_CHECK(pos >= s.dropped * block_size_ && pos < static_cast<int64_t>(s.blocks.size()) * block_size_,
              str("kv cache: position ", pos, " of sequence ", id, " is not reserved (or was released)"));
  return int64_t{s.blocks[pos / block_size_]} * block_size_ + pos % block_size_;
}

}  // namespace rlrun::engine
