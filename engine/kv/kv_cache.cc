#include "engine/kv/kv_cache.h"

#include <algorithm>

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::engine {

KvCacheConfig KvCacheConfig::for_model(const ModelConfig& model, int64_t block_size, int64_t num_blocks) {
  const int64_t window = model.has_sliding_layers() && !model.has_full_layers() ? model.sliding_window : 0;
  return {model.num_layers, model.num_kv_heads, model.head_dim(), block_size, num_blocks, window};
}

int64_t KvCacheConfig::bytes_per_block(DType dtype) const {
  return num_layers * 2 * block_size * num_kv_heads * head_dim * static_cast<int64_t>(dtype_size(dtype));
}

int64_t KvCacheConfig::blocks_for_bytes(int64_t bytes, DType dtype) const {
  const int64_t per = bytes_per_block(dtype);
  return per > 0 && bytes > 0 ? bytes / per : 0;
}

Result<std::unique_ptr<KvCache>> KvCache::create(Backend& backend, const KvCacheConfig& c) {
  if (c.num_layers <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.block_size <= 0 || c.num_blocks <= 0)
    return invalid_argument(str("kv cache: layers (", c.num_layers, "), kv heads (", c.num_kv_heads, "), head_dim (",
                                c.head_dim, "), block_size (", c.block_size, ") and num_blocks (", c.num_blocks,
                                ") must all be > 0; raise gpu_memory_utilization or lower max_model_len"));
  if (c.num_blocks * c.block_size >= (int64_t{1} << 31))
    return invalid_argument(str("kv cache: ", c.num_blocks, " blocks of ", c.block_size,
                                " tokens exceed 2^31 slots; use fewer blocks"));
  return std::unique_ptr<KvCache>(new KvCache(backend, c));
}

KvCache::KvCache(Backend& backend, const KvCacheConfig& c)
    : backend_(&backend), config_(c), tables_(c.num_blocks, c.block_size) {
  const int64_t slots = c.num_blocks * c.block_size;
  const int64_t per = slots * c.num_kv_heads * c.head_dim;  // elements of one K (or V) of one layer
  storage_ = backend.zeros({c.num_layers * 2 * per}, backend.compute_dtype());
  for (int64_t l = 0; l < c.num_layers; ++l) {
    keys_.push_back(storage_.rows((2 * l) * per, (2 * l + 1) * per).view({slots, c.num_kv_heads, c.head_dim}));
    values_.push_back(storage_.rows((2 * l + 1) * per, (2 * l + 2) * per).view({slots, c.num_kv_heads, c.head_dim}));
  }
}

bool KvCache::can_fork(SeqId src, int64_t n) const {
  return config_.window <= 0 || tables_.first_held(src) <= std::max<int64_t>(0, n - config_.window + 1);
}

int64_t KvCache::trim(SeqId id) {
  if (config_.window <= 0) return 0;
  const int64_t dropped = tables_.release_before(id, tables_.length(id) - config_.window + 1);
  blocks_trimmed_ += dropped;
  return dropped;
}

Status KvCache::fork(SeqId src, SeqId dst, int64_t n) {
  if (has_sequence(src) && !can_fork(src, n))
    return invalid_argument(str("kv cache: sequence ", src, " no longer holds the positions a fork of its first ", n,
                                " tokens needs (trimmed outside the window)"));
  RLRUN_ASSIGN_OR_RETURN(KvBlockTables::PartialCopy copy, tables_.fork(src, dst, n));
  if (copy.tokens == 0) {
    trim(dst);  // the shared blocks dst's window does not reach
    return {};
  }
  const int64_t bs = config_.block_size, from = int64_t{copy.from} * bs, to = int64_t{copy.to} * bs;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    backend_->copy(keys_[l].rows(to, to + copy.tokens), keys_[l].rows(from, from + copy.tokens));
    backend_->copy(values_[l].rows(to, to + copy.tokens), values_[l].rows(from, from + copy.tokens));
  }
  trim(dst);
  return {};
}

void KvCache::write(int64_t layer, SeqId id, int64_t start, const Tensor& k, const Tensor& v) {
  RLRUN_CHECK(layer >= 0 && layer < config_.num_layers, "kv cache: layer out of range");
  const int64_t n = k.dim(0);
  RLRUN_CHECK(k.shape() == v.shape() && k.shape() == Shape({n, config_.num_kv_heads, config_.head_dim}),
              "kv cache: write of k " + k.str() + " / v " + v.str());
  const int64_t bs = config_.block_size;
  for (int64_t i = 0; i < n;) {
    // A run: from position start + i to the end of its block (or of the new tokens).
    const int64_t pos = start + i;
    const int64_t run = std::min(n - i, bs - pos % bs);
    const int64_t slot = tables_.slot(id, pos);
    backend_->copy(keys_[layer].rows(slot, slot + run), k.rows(i, i + run));
    backend_->copy(values_[layer].rows(slot, slot + run), v.rows(i, i + run));
    i += run;
  }
}

}  // namespace rlrun::engine
