// trainer_inputs.h - what a trainer process feeds the Trainer: options from the run config and
// micro-batches from the orchestrator's TrainBatch message. The only place the trainer reads
// common/config/config.h and common/protocol/protocol.h.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/config/config.h"
#include "common/protocol/protocol.h"
#include "common/status.h"
#include "trainer/train_step.h"

namespace rlrun::trainer {

// The trainer's options from the validated config: loss (algorithm, clip, TIS, KL, entropy,
// ppo_clip_ref_logprobs, max_tokens), AdamW and clipping, use_distributed_optimizer,
// number_of_minibatches, weight_broadcast_*, and the learning rate of each optimizer step from
// lr_scheduler / warmup_steps / min_lr_ratio (trainer/lr_schedule.h) over the run's
// number_of_steps * number_of_minibatches optimizer steps. A non-empty `learning_rate_at`
// replaces that schedule (tests, tools).
Result<TrainerOptions> trainer_options_from_config(const Config& config,
                                                   std::function<double(int64_t)> learning_rate_at = {});

// This rank's micro-batches of a TrainBatch. The message's token arrays are token-aligned
// (loss_mask[t] = 1 for completion token t, rollout_logprobs[t] its log-prob, advantages[t] its
// sequence's advantage); cu_seqlens covers every token of all rows (padding as segments with a
// zero mask), and each micro-batch's first token (micro_batch_row_offsets[k] * row_len) is a
// segment boundary. Untrusted input: protocol_error names the field at fault.
// Advantages become per-sequence when constant over each sequence's completion (always for the
// built-in algorithms; gspo needs it), per-token otherwise.
Result<std::vector<MicroBatch>> micro_batches_from_train_batch(const TrainBatch& batch);

// The TrainResult of a step: the report's metrics (StepReport::metrics()).
TrainResult train_result(const TrainBatch& batch, const StepReport& report, uint64_t weight_version);

}  // namespace rlrun::trainer
