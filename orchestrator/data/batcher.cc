// batcher.cc - lays packed rows out as TrainBatch arrays.
#include "orchestrator/data/batcher.h"

#include <algorithm>
#include <map>

namespace rlrun::orchestrator {

namespace {

// What the packer places: one sequence, or (share_prompts) a prompt with several samples after it.
struct Unit {
  std::vector<int> sequences;
  bool shared = false;
  int64_t length = 0;
};

std::vector<Unit> make_units(std::span<const TrainSequence> seqs, const PackOptions& o) {
  auto plain_length = [&](int i) { return static_cast<int64_t>(seqs[i].prompt.size() + seqs[i].completion.size()); };
  std::vector<Unit> units;
  if (!o.share_prompts) {
    for (int i = 0; i < static_cast<int>(seqs.size()); ++i) units.push_back({{i}, false, plain_length(i)});
    return units;
  }
  std::map<std::vector<int32_t>, std::vector<int>> by_prompt;  // in first-seen order below
  std::vector<const std::vector<int>*> order;
  for (int i = 0; i < static_cast<int>(seqs.size()); ++i) {
    auto [it, fresh] = by_prompt.try_emplace(std::vector<int32_t>(seqs[i].prompt.begin(), seqs[i].prompt.end()));
    it->second.push_back(i);
    if (fresh) order.push_back(&it->second);
  }
  for (const std::vector<int>* group : order) {
    const int64_t prefix = static_cast<int64_t>(seqs[group->front()].prompt.size()) - 1;
    if (group->size() == 1 || prefix < 1) {
      for (int i : *group) units.push_back({{i}, false, plain_length(i)});
      continue;
    }
    Unit u{{}, true, prefix};
    auto flush = [&] {
      if (u.sequences.size() == 1) units.push_back({u.sequences, false, plain_length(u.sequences.front())});
      else if (!u.sequences.empty()) units.push_back(u);
      u = Unit{{}, true, prefix};
    };
    for (int i : *group) {
      const int64_t child = 1 + static_cast<int64_t>(seqs[i].completion.size());
      if (!u.sequences.empty() && u.length + child > o.seq_len) flush();
      u.sequences.push_back(i);
      u.length += child;
    }
    flush();
  }
  return units;
}

bool trained(const TrainSequence& s, size_t t) { return s.mask.empty() || (t < s.mask.size() && s.mask[t] != 0); }

int64_t trained_tokens(const TrainSequence& s) {
  if (s.mask.empty()) return static_cast<int64_t>(s.completion.size());
  int64_t n = 0;
  for (size_t t = 0; t < s.completion.size(); ++t) n += trained(s, t) ? 1 : 0;
  return n;
}

// The flat arrays of one rank, filled row by row.
struct RankArrays {
  std::vector<int32_t> ids, positions, cu{0}, prefix_of;
  std::vector<uint8_t> mask;
  std::vector<float> advantages, logprobs, ref;
  bool any_sequence = false, all_ref = true;  // whether every sequence came with ref_logprobs

  void token(int32_t id, int32_t position, bool trained, float advantage, float logprob, float ref_logprob = 0.0f) {
    ids.push_back(id);
    positions.push_back(position);
    mask.push_back(trained ? 1 : 0);
    advantages.push_back(advantage);
    logprobs.push_back(logprob);
    ref.push_back(ref_logprob);
  }
  int32_t end_segment(int32_t continues) {
    cu.push_back(static_cast<int32_t>(ids.size()));
    prefix_of.push_back(continues);
    return static_cast<int32_t>(prefix_of.size()) - 1;
  }

  void pad(int64_t n) {
    for (int64_t i = 0; i < n; ++i) token(0, static_cast<int32_t>(i), false, 0.0f, 0.0f);
    if (n > 0) end_segment(-1);
  }

  // The completion of s from position `pos` on.
  void completion(const TrainSequence& s, int32_t pos) {
    const bool has_ref = s.ref_logprobs.size() == s.completion.size();
    any_sequence = true;
    all_ref = all_ref && has_ref;
    for (size_t t = 0; t < s.completion.size(); ++t)
      token(s.completion[t], pos++, trained(s, t), s.advantage, t < s.logprobs.size() ? s.logprobs[t] : 0.0f,
            has_ref ? s.ref_logprobs[t] : 0.0f);
  }

  void add(std::span<const TrainSequence> seqs, const Unit& u) {
    if (!u.shared) {
      const TrainSequence& s = seqs[u.sequences.front()];
      int32_t pos = 0;
      for (int32_t id : s.prompt) token(id, pos++, false, s.advantage, 0.0f);
      completion(s, pos);
      end_segment(-1);
      return;
    }
    const std::span<const int32_t> prompt = seqs[u.sequences.front()].prompt;
    const int32_t last = static_cast<int32_t>(prompt.size()) - 1;
    for (int32_t p = 0; p < last; ++p) token(prompt[p], p, false, 0.0f, 0.0f);
    const int32_t root = end_segment(-1);
    for (int i : u.sequences) {
      token(prompt[last], last, false, seqs[i].advantage, 0.0f);
      completion(seqs[i], last + 1);
      end_segment(root);
    }
  }
};

}  // namespace

BatchBuild build_train_batches(std::span<const TrainSequence> sequences, const PackOptions& options, uint64_t step) {
  BatchBuild out;
  const std::vector<Unit> units = make_units(sequences, options);
  std::vector<int64_t> lengths;
  lengths.reserve(units.size());
  for (const Unit& u : units) lengths.push_back(u.length);
  const PackPlan plan = pack_sequences(lengths, options);
  for (int u : plan.dropped_too_long)
    out.dropped_too_long.insert(out.dropped_too_long.end(), units[u].sequences.begin(), units[u].sequences.end());
  std::sort(out.dropped_too_long.begin(), out.dropped_too_long.end());
  if (plan.micro_batches_per_rank() == 0 || plan.tokens == 0) return out;
  bool any_shared = false;

  int64_t row_len = 1;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank)
      for (const PackedRow& row : mb) row_len = std::max(row_len, row.tokens);
  const int64_t multiple = std::max<int64_t>(1, options.pad_to_multiple_of);
  row_len = std::min(options.seq_len, (row_len + multiple - 1) / multiple * multiple);

  for (size_t r = 0; r < plan.micro_batches.size(); ++r) {
    RankArrays a;
    TrainBatch b;
    b.step = step;
    b.rank = static_cast<uint32_t>(r);
    b.row_len = static_cast<uint32_t>(row_len);
    b.num_micro_batches = static_cast<uint32_t>(plan.micro_batches[r].size());
    b.micro_batch_row_offsets.push_back(0);
    uint32_t rows = 0;
    for (const auto& mb : plan.micro_batches[r]) {
      for (const PackedRow& row : mb) {
        for (int u : row.sequences) {
          a.add(sequences, units[u]);
          any_shared = any_shared || units[u].shared;
          for (int i : units[u].sequences) out.loss_tokens += trained_tokens(sequences[i]);
          if (units[u].shared)
            out.shared_prompt_tokens += static_cast<int64_t>(units[u].sequences.size() - 1) *
                                        static_cast<int64_t>(sequences[units[u].sequences[0]].prompt.size() - 1);
        }
        a.pad(row_len - row.tokens);
        ++rows;
      }
      b.micro_batch_row_offsets.push_back(rows);
    }
    b.num_rows = rows;
    b.input_ids = std::move(a.ids);
    b.position_ids = std::move(a.positions);
    b.cu_seqlens = std::move(a.cu);
    b.loss_mask = std::move(a.mask);
    b.advantages = std::move(a.advantages);
    b.rollout_logprobs = std::move(a.logprobs);
    b.prefix_of = std::move(a.prefix_of);
    if (a.any_sequence && a.all_ref) b.ref_logprobs = std::move(a.ref);
    out.per_rank.push_back(std::move(b));
  }
  for (TrainBatch& b : out.per_rank) {
    b.loss_token_count = static_cast<uint64_t>(out.loss_tokens);
    if (!any_shared) b.prefix_of = {};  // every segment stands alone: say nothing
  }
  out.tokens = plan.tokens;
  return out;
}

}  // namespace rlrun::orchestrator
