#include "engine/kv/kv_block_table.h"

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::engine {

KvBlockTables::KvBlockTables(int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  RLRUN_CHECK(num_blocks > 0 && block_size > 0, "kv cache needs at least one block of one token");
  RLRUN_CHECK(num_blocks * block_size < (int64_t{1} << 31), "kv cache slots must fit in int32");
  free_.reserve(num_blocks);
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
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) free_.push_back(*b);
  seqs_.erase(it);
  return {};
}

const KvBlockTables::Sequence& KvBlockTables::seq(SeqId id) const {
  auto it = seqs_.find(id);
  RLRUN_CHECK(it != seqs_.end(), str("kv cache: unknown sequence ", id));
  return it->second;
}

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
  for (int64_t i = 0; i < need; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
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
  RLRUN_CHECK(pos >= 0 && pos < static_cast<int64_t>(s.blocks.size()) * block_size_,
              str("kv cache: position ", pos, " of sequence ", id, " is not reserved"));
  return int64_t{s.blocks[pos / block_size_]} * block_size_ + pos % block_size_;
}

}  // namespace rlrun::engine
