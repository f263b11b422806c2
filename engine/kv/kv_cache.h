// kv_cache.h - the paged KV cache: K and V storage for every layer in fixed-size blocks drawn
// from one pool, addressed through per-sequence block tables (kv_block_table.h).
//
// Storage per layer: keys(l), values(l) are (num_blocks * block_size, Hkv, D) in the backend's
// compute dtype; slot s = block * block_size + offset holds one token's K (or V) for every kv
// head. All layers live in one allocation made at construction, sized by the caller (for example
// from gpu_memory_utilization with blocks_for_bytes); the cache never grows after that.
//
// Life of a sequence: add_sequence(id) -> the model's forward_cached() reserves blocks, writes
// K/V and commits the new length -> ... -> release(id) when it finishes, is cancelled or is
// preempted (preemption recomputes from scratch later: its blocks are simply returned).
// With config().window > 0 the forward also trims each sequence after writing its new tokens.
//
// Ownership: the Backend must outlive the cache. Not thread-safe: one scheduler thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/kv/kv_block_table.h"
#include "engine/model/config.h"

namespace rlrun::engine {

struct KvCacheConfig {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;  // tokens per block
  int64_t num_blocks = 0;
  // > 0: every layer attends within the last `window` positions, so a sequence's blocks wholly
  // before length - window + 1 are never read again and go back to the pool (KvCache::trim).
  // 0: every block is kept (a model with a full-attention layer, e.g. Gemma 3's global ones).
  int64_t window = 0;

  // window: the model's sliding_window when every layer is a sliding one, else 0.
  static KvCacheConfig for_model(const ModelConfig& model, int64_t block_size, int64_t num_blocks);
  // Bytes of K and V of one block over every layer.
  int64_t bytes_per_block(DType dtype) const;
  // How many blocks fit in `bytes` (>= 0).
  int64_t blocks_for_bytes(int64_t bytes, DType dtype) const;
};

class KvCache {
 public:
  // invalid_argument when a size is not positive.
  static Result<std::unique_ptr<KvCache>> create(Backend& backend, const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  int64_t block_size() const { return config_.block_size; }

  // ---- sequences (see KvBlockTables for the contracts) ----
  Status add_sequence(SeqId id) { return tables_.add_sequence(id); }
  Status release(SeqId id) { return tables_.release(id); }
  // Starts the empty sequence `dst` with the first n tokens of `src` (KvBlockTables::fork: full
  // blocks shared, the partial one copied here for every layer), then trims dst. Errors as
  // fork's, and invalid_argument when !can_fork(src, n).
  Status fork(SeqId src, SeqId dst, int64_t n);
  // Whether fork(src, dst, n) gives dst every position its next query (at n) sees: false when
  // src has trimmed a block dst's window still needs.
  bool can_fork(SeqId src, int64_t n) const;
  // With window > 0: gives up the blocks of `id` wholly before length - window + 1, which no
  // later query of `id` sees. Returns the table entries dropped (0 with window 0).
  int64_t trim(SeqId id);
  // Lifetime count of table entries trim() dropped (a block shared by forks counts per holder).
  int64_t blocks_trimmed() const { return blocks_trimmed_; }
  bool has_sequence(SeqId id) const { return tables_.has_sequence(id); }
  int64_t length(SeqId id) const { return tables_.length(id); }
  int64_t num_free_blocks() const { return tables_.num_free_blocks(); }
  KvBlockTables& tables() { return tables_; }
  const KvBlockTables& tables() const { return tables_; }

  // ---- storage ----
  const Tensor& keys(int64_t layer) const { return keys_[layer]; }
  const Tensor& values(int64_t layer) const { return values_[layer]; }
  // Copies k, v (n, Hkv, D) into the slots of positions [start, start + n) of `id` in `layer`.
  // The positions must be reserved. Works on any backend: one copy per run of adjacent slots.
  void write(int64_t layer, SeqId id, int64_t start, const Tensor& k, const Tensor& v);

 private:
  KvCache(Backend& backend, const KvCacheConfig& config);

  Backend* backend_;
  KvCacheConfig config_;
  KvBlockTables tables_;
  Tensor storage_;  // (num_layers, 2, slots, Hkv, D)
  std::vector<Tensor> keys_, values_;
  int64_t blocks_trimmed_ = 0;
};

}  // namespace rlrun::engine
