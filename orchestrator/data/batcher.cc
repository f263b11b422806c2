// batcher.cc - lays packed rows out as TrainBatch arrays.
#include "orchestrator/data/batcher.h"

#include <algorithm>

namespace rlrun::orchestrator {

namespace {

// The flat arrays of one rank, filled row by row.
struct RankArrays {
  std::vector<int32_t> ids, positions, cu{0};
  std::vector<uint8_t> mask;
  std::vector<float> advantages, logprobs;

  void pad(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      ids.push_back(0);
      positions.push_back(static_cast<int32_t>(i));
      mask.push_back(0);
      advantages.push_back(0.0f);
      logprobs.push_back(0.0f);
    }
    if (n > 0) cu.push_back(static_cast<int32_t>(ids.size()));
  }

  void add(const TrainSequence& s) {
    int32_t pos = 0;
    for (int32_t id : s.prompt) {
      ids.push_back(id);
      positions.push_back(pos++);
      mask.push_back(0);
      advantages.push_back(s.advantage);
      logprobs.push_back(0.0f);
    }
    for (size_t t = 0; t < s.completion.size(); ++t) {
      ids.push_back(s.completion[t]);
      positions.push_back(pos++);
      mask.push_back(1);
      advantages.push_back(s.advantage);
      logprobs.push_back(t < s.logprobs.size() ? s.logprobs[t] : 0.0f);
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
};

}  // namespace

BatchBuild build_train_batches(std::span<const TrainSequence> sequences, const PackOptions& options, uint64_t step) {
  BatchBuild out;
  std::vector<int64_t> lengths;
  lengths.reserve(sequences.size());
  for (const TrainSequence& s : sequences) lengths.push_back(static_cast<int64_t>(s.prompt.size() + s.completion.size()));
  const PackPlan plan = pack_sequences(lengths, options);
  out.dropped_too_long = plan.dropped_too_long;
  if (plan.micro_batches_per_rank() == 0 || plan.tokens == 0) return out;

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
        for (int i : row.sequences) {
          a.add(sequences[i]);
          out.loss_tokens += static_cast<int64_t>(sequences[i].completion.size());
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
    out.per_rank.push_back(std::move(b));
  }
  for (TrainBatch& b : out.per_rank) b.loss_token_count = static_cast<uint64_t>(out.loss_tokens);
  out.tokens = plan.tokens;
  return out;
}

}  // namespace rlrun::orchestrator
