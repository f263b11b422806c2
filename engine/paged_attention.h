// paged_attention.h - causal GQA attention of new query tokens over a paged KV cache.
//
// TEMPORARY HOME: the Backend has no paged-attention op yet, so this is a host-side (CPU)
// implementation behind one function; it aborts on a backend whose memory is not host memory.
// It belongs in Backend (paged_attention_forward) next to attention_forward; moving it there
// changes no caller but Model::forward_cached.
//
// For sequence s, the query rows cu_q[s] .. cu_q[s+1] are its new tokens at positions
// start[s], start[s] + 1, ...; their K/V are already in the cache. The query at position p
// attends to the cached positions 0..p of its own sequence, whose slots come from the block
// table: slot(p) = table[p / block_size] * block_size + p % block_size. Scale 1/sqrt(D).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/tensor.h"

namespace rlrun::engine {

struct PagedAttentionBatch {
  std::span<const int32_t> cu_q;                        // (S+1) query rows per sequence
  std::span<const int64_t> start;                       // (S) position of each sequence's first query
  std::vector<std::span<const int32_t>> block_tables;   // (S) blocks of each sequence
  int64_t block_size = 0;
};

// out, q (N, Hq, D); k_cache, v_cache (slots, Hkv, D); Hq % Hkv == 0. f32 host tensors.
void paged_attention_forward(const Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                             const PagedAttentionBatch& batch);

}  // namespace rlrun::engine
