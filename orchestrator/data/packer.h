// packer.h - packs whole sequences into rows of seq_len tokens and deals rows to trainer ranks.
//
// First-fit-decreasing: sequences sorted by length (longest first) go into the first row with
// room; a sequence is never split, and one longer than seq_len is dropped (reported, never
// silently). Each row's length is rounded up to pad_to_multiple_of (never beyond seq_len). Rows go
// to ranks longest-first onto the rank with the fewest tokens, with at most ceil(rows / ranks)
// rows per rank; every rank then gets the same number of micro-batches of micro_batch_rows rows,
// ranks short of rows receiving empty padding rows (zero tokens, zero loss). A batch that first-fit
// puts in no more rows than min_micro_batches micro-batches of full rows on every rank
// (number_of_minibatches: each minibatch is a slice of them) is spread evenly over that many rows
// instead (as many as it has sequences, when fewer), so ranks and minibatches get equal shares.
#pragma once

#include <cstdint>
#include <vector>

namespace rlrun::orchestrator {

struct PackOptions {
  int64_t seq_len = 1024;
  int64_t pad_to_multiple_of = 1;
  int num_ranks = 1;
  int micro_batch_rows = 1;  // rows per micro-batch
  bool share_prompts = false;  // batcher.h: the samples of one prompt follow it, written once
  int min_micro_batches = 1;   // per rank, when the sequences allow (number_of_minibatches)
};

struct PackedRow {
  std::vector<int> sequences;  // indices into the input lengths, in placement order
  int64_t tokens = 0;          // sum of the sequences' lengths
  int64_t padded_tokens = 0;   // tokens rounded up to pad_to_multiple_of; 0 for a padding row
};

struct PackPlan {
  // micro_batches[rank][m] is micro-batch m of `rank`: micro_batch_rows rows (padding rows included).
  std::vector<std::vector<std::vector<PackedRow>>> micro_batches;
  std::vector<int> dropped_too_long;  // indices of sequences longer than seq_len
  int64_t tokens = 0;                 // real tokens packed
  int64_t padded_tokens = 0;          // tokens including padding, over all ranks and rows

  int micro_batches_per_rank() const { return micro_batches.empty() ? 0 : static_cast<int>(micro_batches[0].size()); }
  int64_t rank_tokens(int rank) const;
};

// lengths[i] is sequence i's token count (prompt + completion). Options must be valid
// (seq_len >= 1, pad_to_multiple_of >= 1, num_ranks >= 1, micro_batch_rows >= 1,
// min_micro_batches >= 1).
PackPlan pack_sequences(const std::vector<int64_t>& lengths, const PackOptions& options);

}  // namespace rlrun::orchestrator
