// model/infer.cc - prefill and decode over the paged KV cache (one code path for both).
#include <algorithm>
#include <unordered_set>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/model/layer.h"
#include "engine/model/model.h"

namespace rlrun::engine {

namespace {

Status validate_cached_batch(const ModelConfig& c, const KvCache& cache, std::span<const SeqId> seqs,
                             std::span<const int32_t> tokens, std::span<const int32_t> cu_new) {
  const KvCacheConfig& kc = cache.config();
  if (kc.num_layers != c.num_layers || kc.num_kv_heads != c.num_kv_heads || kc.head_dim != c.head_dim())
    return invalid_argument("kv cache was made for another model shape (layers, kv heads, head_dim)");
  if (seqs.empty()) return invalid_argument("forward_cached: no sequences");
  if (cu_new.size() != seqs.size() + 1 || cu_new.front() != 0 || static_cast<size_t>(cu_new.back()) != tokens.size())
    return invalid_argument(str("forward_cached: cu_new must have ", seqs.size() + 1, " entries from 0 to ",
                                tokens.size()));
  std::unordered_set<SeqId> seen;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (cu_new[s + 1] <= cu_new[s]) return invalid_argument(str("forward_cached: sequence ", seqs[s], " has no new tokens"));
    if (!cache.has_sequence(seqs[s])) return invalid_argument(str("forward_cached: sequence ", seqs[s], " is not in the kv cache"));
    if (!seen.insert(seqs[s]).second) return invalid_argument(str("forward_cached: sequence ", seqs[s], " appears twice"));
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t end = cache.length(seqs[s]) + cu_new[s + 1] - cu_new[s];
    if (c.rope_scaling.type == "dynamic" && end > c.max_position)
      return invalid_argument(str("forward_cached: sequence ", seqs[s], " would reach position ", end - 1,
                                  ", past max_position_embeddings ", c.max_position,
                                  ", where dynamic RoPE would rescale (not implemented)"));
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      return invalid_argument(str("forward_cached: token ", i, " has id ", tokens[i], " outside the vocabulary [0, ",
                                  c.vocab_size, ")"));
  return {};
}

// Reserves room for every sequence's new tokens, all or nothing.
Status reserve_all(KvCache& cache, std::span<const SeqId> seqs, std::span<const int32_t> cu_new) {
  int64_t need = 0;
  for (size_t s = 0; s < seqs.size(); ++s) need += cache.tables().blocks_needed(seqs[s], cu_new[s + 1] - cu_new[s]);
  if (need > cache.num_free_blocks())
    return resource_exhausted(str("kv cache: the batch needs ", need, " more blocks but ", cache.num_free_blocks(),
                                  " are free; preempt or finish a sequence first"));
  for (size_t s = 0; s < seqs.size(); ++s) RLRUN_CHECK(cache.tables().reserve(seqs[s], cu_new[s + 1] - cu_new[s]).ok());
  return {};
}

}  // namespace

Result<Tensor> Model::forward_cached(KvCache& cache, std::span<const SeqId> seqs, std::span<const int32_t> tokens,
                                     std::span<const int32_t> cu_new) {
  const ModelConfig& c = config();
  RLRUN_RETURN_IF_ERROR(validate_cached_batch(c, cache, seqs, tokens, cu_new));
  RLRUN_RETURN_IF_ERROR(reserve_all(cache, seqs, cu_new));
  Backend& b = backend();
  const int64_t n = static_cast<int64_t>(tokens.size()), num_seqs = static_cast<int64_t>(seqs.size());

  // Positions of the new tokens and the attention's view of the cache, uploaded once per call.
  std::vector<int32_t> start(num_seqs), positions(n);
  int64_t max_blocks = 1, max_context = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    start[s] = static_cast<int32_t>(cache.length(seqs[s]));
    for (int32_t i = cu_new[s]; i < cu_new[s + 1]; ++i) positions[i] = start[s] + i - cu_new[s];
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(cache.tables().table(seqs[s]).size()));
    max_context = std::max<int64_t>(max_context, start[s] + cu_new[s + 1] - cu_new[s]);
  }
  std::vector<int32_t> tables(num_seqs * max_blocks, 0);  // rows padded with block 0, never read
  for (int64_t s = 0; s < num_seqs; ++s) {
    // Blocks trimmed outside an all-sliding model's window lie before every query's window: the
    // kernels may load them (a prefill gathers whole tiles) but mask them out. They point at
    // block 0, like the padding, so every slot a kernel computes is inside the cache.
    const auto t = cache.tables().table(seqs[s]);
    std::transform(t.begin(), t.end(), tables.begin() + s * max_blocks,
                   [](int32_t block) { return block == kNoBlock ? 0 : block; });
  }
  const Tensor ids = from_host_i32(b, {n}, tokens);
  const Tensor pos = from_host_i32(b, {n}, positions);
  const Tensor cu_q = from_host_i32(b, {num_seqs + 1}, cu_new);
  const Tensor seq_start = from_host_i32(b, {num_seqs}, start);
  const Tensor block_tables = from_host_i32(b, {num_seqs, max_blocks}, tables);

  Tensor x = b.uninitialized({n, c.hidden_size}, b.compute_dtype());
  Tensor x_next = b.uninitialized({n, c.hidden_size}, b.compute_dtype());
  b.embedding_forward(x, weights_.embed_tokens(), ids);
  if (c.embedding_scale != 1.0) b.scale(x, static_cast<float>(c.embedding_scale));
  LayerActs a = alloc_layer_acts(b, c, n, /*save_stats=*/false);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerLora lora = layer_lora(l, false);
    layer_qkv_forward(b, c, weights_.layer(l), ropes_[l], x, pos, a, lora);
    for (int64_t s = 0; s < num_seqs; ++s)
      cache.write(l, seqs[s], start[s], a.k.rows(cu_new[s], cu_new[s + 1]), a.v.rows(cu_new[s], cu_new[s + 1]));
    b.paged_attention_forward(a.attn, a.q, cache.keys(l), cache.values(l), cu_q, seq_start, block_tables,
                              cache.block_size(), max_context, ropes_[l].window);
    layer_post_attention_forward(b, c, weights_.layer(l), x, a, x_next, lora);
    std::swap(x, x_next);
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    cache.tables().commit(seqs[s], cu_new[s + 1] - cu_new[s]);
    cache.trim(seqs[s]);  // an all-sliding model: what every later query's window has left behind
  }

  // Only each sequence's last new token needs the head.
  Tensor last = b.uninitialized({num_seqs, c.hidden_size}, b.compute_dtype());
  for (int64_t s = 0; s < num_seqs; ++s) b.copy(last.rows(s, s + 1), x.rows(cu_new[s + 1] - 1, cu_new[s + 1]));
  Tensor normed = b.uninitialized({num_seqs, c.hidden_size}, b.compute_dtype());
  b.rmsnorm_forward(normed, Tensor(), last, weights_.final_norm(), static_cast<float>(c.rms_norm_eps),
                    static_cast<float>(c.norm_weight_offset));
  Tensor logits = b.uninitialized({num_seqs, c.vocab_size}, b.compute_dtype());
  b.matmul(logits, normed, weights_.lm_head(), false, true);
  return logits;
}

Result<Tensor> Model::decode(KvCache& cache, std::span<const SeqId> seqs, std::span<const int32_t> tokens) {
  if (tokens.size() != seqs.size())
    return invalid_argument(str("decode: ", seqs.size(), " sequences but ", tokens.size(), " tokens"));
  std::vector<int32_t> cu(seqs.size() + 1);
  for (size_t s = 0; s <= seqs.size(); ++s) cu[s] = static_cast<int32_t>(s);
  return forward_cached(cache, seqs, tokens, cu);
}

}  // namespace rlrun::engine
