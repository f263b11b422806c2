#include "trainer/trainable_model.h"

#include <algorithm>
#include <cmath>

#include "common/observe/log.h"

namespace rlrun::trainer {

std::vector<ParamRange> decay_ranges(std::span<const ParamSpec> specs) {
  std::vector<ParamRange> ranges;
  ranges.reserve(specs.size());
  for (const ParamSpec& p : specs) ranges.push_back({p.offset, p.offset + p.numel, p.shape.size() >= 2});
  return ranges;
}

namespace {

Status check_cu_seqlens(std::span<const int32_t> cu, size_t n) {
  if (cu.size() < 2 || cu.front() != 0 || static_cast<size_t>(cu.back()) != n) {
    return invalid_argument(str("micro-batch: cu_seqlens must start at 0 and end at the token count ", n,
                                " (", cu.size(), " entries given)"));
  }
  for (size_t s = 1; s < cu.size(); ++s) {
    if (cu[s] <= cu[s - 1]) return invalid_argument(str("micro-batch: cu_seqlens[", s, "] = ", cu[s], " is not above cu_seqlens[", s - 1, "]"));
  }
  return Status();
}

}  // namespace

Status validate_micro_batch(const MicroBatch& mb, bool with_ref) {
  const size_t n = mb.input_ids.size();
  if (n == 0) return Status();  // an empty padding micro-batch
  auto bad = [&](const char* field, size_t got) {
    return invalid_argument(str("micro-batch: `", field, "` has ", got, " entries for ", n, " tokens"));
  };
  if (mb.position_ids.size() != n) return bad("position_ids", mb.position_ids.size());
  if (mb.targets.size() != n) return bad("targets", mb.targets.size());
  if (mb.loss_mask.size() != n) return bad("loss_mask", mb.loss_mask.size());
  if (mb.rollout_logprobs.size() != n) return bad("rollout_logprobs", mb.rollout_logprobs.size());
  if ((with_ref || !mb.ref_logprobs.empty()) && mb.ref_logprobs.size() != n)
    return bad("ref_logprobs", mb.ref_logprobs.size());
  RLRUN_RETURN_IF_ERROR(check_cu_seqlens(mb.cu_seqlens, n));
  const size_t seqs = mb.cu_seqlens.size() - 1;
  if (mb.advantages.size() != seqs && mb.advantages.size() != n) {
    return invalid_argument(str("micro-batch: `advantages` has ", mb.advantages.size(), " entries; expected one per "
                                "sequence (", seqs, ") or per token (", n, ")"));
  }
  for (size_t i = 0; i < mb.advantages.size(); ++i) {
    if (!std::isfinite(mb.advantages[i])) return invalid_argument(str("micro-batch: advantages[", i, "] is not finite"));
  }
  for (size_t t = 0; t < n; ++t) {
    if (mb.loss_mask[t] && !std::isfinite(mb.rollout_logprobs[t])) {
      return invalid_argument(str("micro-batch: rollout_logprobs[", t, "] of a trained token is not finite"));
    }
    if (mb.loss_mask[t] && !mb.ref_logprobs.empty() && !std::isfinite(mb.ref_logprobs[t]))
      return invalid_argument(str("micro-batch: ref_logprobs[", t, "] of a trained token is not finite"));
  }
  if (mb.prefix_of.empty()) return Status();
  if (mb.prefix_of.size() != seqs)
    return invalid_argument(str("micro-batch: `prefix_of` has ", mb.prefix_of.size(), " entries for ", seqs, " sequences"));
  for (size_t s = 0; s < seqs; ++s) {
    const int32_t p = mb.prefix_of[s];
    if (p < 0) continue;
    if (static_cast<size_t>(p) >= s)
      return invalid_argument(str("micro-batch: sequence ", s, " continues sequence ", p, ", which is not an earlier sequence"));
    for (int32_t t = mb.cu_seqlens[p]; t < mb.cu_seqlens[p + 1]; ++t)
      if (mb.loss_mask[t]) return invalid_argument(str("micro-batch: shared prefix ", p, " has a trained token (", t, ")"));
  }
  return Status();
}

namespace {

// Appends the per-token entries [begin, end) of `mb` to `out` (advantages too when per token).
void append_rows(MicroBatch& out, const MicroBatch& mb, int32_t begin, int32_t end, bool per_seq) {
  for (int32_t t = begin; t < end; ++t) {
    out.input_ids.push_back(mb.input_ids[t]);
    out.position_ids.push_back(mb.position_ids[t]);
    out.targets.push_back(mb.targets[t]);
    out.loss_mask.push_back(mb.loss_mask[t]);
    out.rollout_logprobs.push_back(mb.rollout_logprobs[t]);
    if (!per_seq) out.advantages.push_back(mb.advantages[t]);
    if (!mb.ref_logprobs.empty()) out.ref_logprobs.push_back(mb.ref_logprobs[t]);
  }
}

// ... of sequence s.
void append_token_rows(MicroBatch& out, const MicroBatch& mb, size_t s, bool per_seq) {
  append_rows(out, mb, mb.cu_seqlens[s], mb.cu_seqlens[s + 1], per_seq);
}

}  // namespace

void drop_untrained_sequences(MicroBatch& mb) {
  const size_t seqs = mb.cu_seqlens.size() - 1, n = mb.input_ids.size();
  if (n == 0) return;
  std::vector<bool> keep(seqs, false);
  for (size_t s = 0; s < seqs; ++s)
    for (int32_t t = mb.cu_seqlens[s]; t < mb.cu_seqlens[s + 1] && !keep[s]; ++t) keep[s] = mb.loss_mask[t] != 0;
  if (!mb.prefix_of.empty())  // last to first: a kept continuation keeps its whole chain of prefixes
    for (size_t s = seqs; s-- > 0;)
      if (keep[s] && mb.prefix_of[s] >= 0) keep[mb.prefix_of[s]] = true;
  if (std::all_of(keep.begin(), keep.end(), [](bool k) { return k; })) return;
  const bool per_seq = mb.advantages.size() == seqs && seqs != n;
  MicroBatch out;
  out.cu_seqlens = {0};
  std::vector<int32_t> new_index(seqs, -1);
  for (size_t s = 0; s < seqs; ++s) {
    if (!keep[s]) continue;
    append_token_rows(out, mb, s, per_seq);
    new_index[s] = static_cast<int32_t>(out.cu_seqlens.size()) - 1;
    out.cu_seqlens.push_back(static_cast<int32_t>(out.input_ids.size()));
    if (per_seq) out.advantages.push_back(mb.advantages[s]);
    if (!mb.prefix_of.empty()) out.prefix_of.push_back(mb.prefix_of[s] < 0 ? -1 : new_index[mb.prefix_of[s]]);
  }
  if (out.input_ids.empty()) out = MicroBatch{};  // nothing to train: an empty micro-batch
  mb = std::move(out);
}

void share_common_prefix(MicroBatch& mb) {
  if (mb.prefix_of.empty()) return;
  const size_t seqs = mb.cu_seqlens.size() - 1;
  std::vector<bool> is_root(seqs, false);  // a shared prompt: others continue it, it continues none
  for (int32_t p : mb.prefix_of)
    if (p >= 0 && mb.prefix_of[static_cast<size_t>(p)] < 0) is_root[static_cast<size_t>(p)] = true;
  std::vector<size_t> roots;
  for (size_t s = 0; s < seqs; ++s)
    if (is_root[s]) roots.push_back(s);
  if (roots.size() < 2) return;
  // The common start, leaving every root at least one token of its own.
  int32_t common = INT32_MAX;
  const int32_t first = mb.cu_seqlens[roots[0]];
  for (size_t r : roots) {
    const int32_t begin = mb.cu_seqlens[r], len = mb.cu_seqlens[r + 1] - begin;
    int32_t same = 0;
    while (same < len - 1 && same < common && mb.input_ids[begin + same] == mb.input_ids[first + same] &&
           mb.position_ids[begin + same] == mb.position_ids[first + same])
      ++same;
    common = std::min(common, same);
  }
  if (common < 1) return;
  const bool per_seq = mb.advantages.size() == seqs && seqs != mb.input_ids.size();
  MicroBatch out;
  append_rows(out, mb, first, first + common, per_seq);  // the common start: sequence 0
  std::fill(out.targets.begin(), out.targets.end(), -1);  // a prefix predicts nothing it trains
  out.cu_seqlens = {0, common};
  out.prefix_of = {-1};
  if (per_seq) out.advantages.push_back(0.0f);
  for (size_t s = 0; s < seqs; ++s) {
    append_rows(out, mb, mb.cu_seqlens[s] + (is_root[s] ? common : 0), mb.cu_seqlens[s + 1], per_seq);
    out.cu_seqlens.push_back(static_cast<int32_t>(out.input_ids.size()));
    if (per_seq) out.advantages.push_back(mb.advantages[s]);
    out.prefix_of.push_back(is_root[s] ? 0 : mb.prefix_of[s] < 0 ? -1 : mb.prefix_of[s] + 1);
  }
  mb = std::move(out);
}

MicroBatch expand_shared_prefixes(const MicroBatch& mb) {
  if (mb.prefix_of.empty()) return mb;
  const size_t seqs = mb.cu_seqlens.size() - 1;
  const bool per_seq = mb.advantages.size() == seqs && seqs != mb.input_ids.size();
  std::vector<bool> is_prefix(seqs, false);
  for (int32_t p : mb.prefix_of)
    if (p >= 0) is_prefix[p] = true;
  MicroBatch out;
  out.cu_seqlens = {0};
  std::vector<size_t> chain;
  for (size_t s = 0; s < seqs; ++s) {
    if (is_prefix[s]) continue;  // written out before each continuation
    chain.clear();               // s and the prefixes it continues, outermost last
    for (int32_t p = static_cast<int32_t>(s); p >= 0; p = mb.prefix_of[static_cast<size_t>(p)]) chain.push_back(static_cast<size_t>(p));
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) append_token_rows(out, mb, *it, per_seq);
    out.cu_seqlens.push_back(static_cast<int32_t>(out.input_ids.size()));
    if (per_seq) out.advantages.push_back(mb.advantages[s]);
  }
  return out;
}

Result<MicroBatch> make_micro_batch(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                    std::span<const int32_t> cu_seqlens, std::span<const uint8_t> loss_mask,
                                    std::span<const float> advantages, std::span<const float> rollout_logprobs,
                                    std::span<const int32_t> prefix_of, std::span<const float> ref_logprobs) {
  const size_t n = tokens.size();
  if (positions.size() != n || loss_mask.size() != n || rollout_logprobs.size() != n) {
    return invalid_argument(str("micro-batch: positions (", positions.size(), "), loss_mask (", loss_mask.size(),
                                ") and rollout_logprobs (", rollout_logprobs.size(), ") must have one entry per token (", n, ")"));
  }
  RLRUN_RETURN_IF_ERROR(check_cu_seqlens(cu_seqlens, n));
  const size_t seqs = cu_seqlens.size() - 1;
  const bool per_token = advantages.size() == n && n != seqs;
  if (advantages.size() != seqs && !per_token) {
    return invalid_argument(str("micro-batch: advantages has ", advantages.size(), " entries; expected one per sequence (",
                                seqs, ") or per token (", n, ")"));
  }
  if (!prefix_of.empty() && prefix_of.size() != seqs)
    return invalid_argument(str("micro-batch: prefix_of has ", prefix_of.size(), " entries for ", seqs, " sequences"));
  if (!ref_logprobs.empty() && ref_logprobs.size() != n)
    return invalid_argument(str("micro-batch: ref_logprobs has ", ref_logprobs.size(), " entries for ", n, " tokens"));
  MicroBatch mb;
  mb.prefix_of.assign(prefix_of.begin(), prefix_of.end());
  mb.input_ids.assign(tokens.begin(), tokens.end());
  mb.position_ids.assign(positions.begin(), positions.end());
  mb.cu_seqlens.assign(cu_seqlens.begin(), cu_seqlens.end());
  mb.targets.assign(n, -1);
  mb.loss_mask.assign(n, 0);
  mb.rollout_logprobs.assign(n, 0.0f);
  if (!ref_logprobs.empty()) mb.ref_logprobs.assign(n, 0.0f);
  if (per_token) {
    mb.advantages.assign(n, 0.0f);
  } else {
    mb.advantages.assign(advantages.begin(), advantages.end());
  }
  for (size_t s = 0; s < seqs; ++s) {
    for (int32_t t = cu_seqlens[s]; t + 1 < cu_seqlens[s + 1]; ++t) {
      mb.loss_mask[t] = loss_mask[t + 1] != 0 ? 1 : 0;
      mb.targets[t] = mb.loss_mask[t] ? tokens[t + 1] : -1;  // untrained: the head need not score it
      mb.rollout_logprobs[t] = mb.loss_mask[t] ? rollout_logprobs[t + 1] : 0.0f;
      if (!ref_logprobs.empty()) mb.ref_logprobs[t] = mb.loss_mask[t] ? ref_logprobs[t + 1] : 0.0f;
      if (per_token) mb.advantages[t] = advantages[t + 1];
    }
  }
  return mb;
}

}  // namespace rlrun::trainer
