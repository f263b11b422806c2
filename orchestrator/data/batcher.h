// batcher.h - finished samples -> one TrainBatch per trainer rank (design step 6).
//
// Each sequence is prompt + completion, never split. packer.h places sequences into rows
// (first-fit-decreasing) and deals rows to ranks; this file lays the rows out as the protocol's
// token-aligned arrays. Every rank's batch has the same row_len: the longest packed row, rounded
// up to pad_to_multiple_of (never beyond seq_len), so short batches do not pay for seq_len.
//   input_ids      prompt then completion tokens; padding 0
//   position_ids   0, 1, ... restarting per sequence (and per padding segment)
//   cu_seqlens     sequence boundaries; a row's padding tail, and each padding row, is a segment
//   loss_mask      1 on completion tokens only (those TrainSequence::mask keeps)
//   advantages     the sequence's advantage on all its tokens (0 on padding)
//   rollout_logprobs  the rollout log-prob of each completion token (0 elsewhere)
//   prefix_of      with share_prompts: the segment each segment continues, or -1
//   ref_logprobs   the KL reference's log-prob of each completion token (0 elsewhere), when every
//                  sequence of the rank's batch has them; else empty
// The trainer shifts these into next-token targets (trainer_inputs.h).
//
// share_prompts: sequences with the same prompt (a GRPO group) are packed as ONE unit: the
// prompt less its last token (a segment of its own, trained on nothing), then each sample as a
// segment continuing it: the prompt's last token and the completion, positions going on from the
// prompt. The trainer computes the prompt once (engine/model/model.h PackedBatch::prefix_of); the
// gradients are those of the repeated layout. A unit longer than seq_len is split into several,
// each with its own copy of the prompt; a single sample is packed as a plain sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/protocol/protocol.h"
#include "orchestrator/data/packer.h"

namespace rlrun::orchestrator {

struct TrainSequence {
  std::span<const int32_t> prompt;
  std::span<const int32_t> completion;
  std::span<const float> logprobs;  // one per completion token
  float advantage = 0;
  // One per completion token, 1 = trained; empty: all are. An episode's completion holds the
  // environment's tokens (tool outputs, user turns) between the policy's turns, with 0 here.
  std::span<const uint8_t> mask = {};
  // One per completion token: the KL reference's log-probs as a rollout worker scored them; empty:
  // not scored (the trainer scores a rank's batch itself unless every sequence in it has them).
  std::span<const float> ref_logprobs = {};
};

struct BatchBuild {
  std::vector<TrainBatch> per_rank;   // per_rank[r] goes to trainer rank r
  std::vector<int> dropped_too_long;  // indices of sequences longer than seq_len (not packed)
  int64_t tokens = 0;                 // real tokens packed (prompt + completion; a shared prompt once)
  int64_t loss_tokens = 0;            // trained (loss-mask) tokens packed
  int64_t shared_prompt_tokens = 0;   // prompt tokens not packed again thanks to share_prompts
};

// `options` as for pack_sequences. At least one sequence must fit, else per_rank is empty.
BatchBuild build_train_batches(std::span<const TrainSequence> sequences, const PackOptions& options, uint64_t step);

}  // namespace rlrun::orchestrator
