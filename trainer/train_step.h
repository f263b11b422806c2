// train_step.h - the trainer: optimizer steps over packed micro-batches, weight send, checkpoints.
//
// One train(batch) call (design "A sample's life", step 7) on every trainer rank, collectively:
//   0. ppo_clip_ref_logprobs: batch -> recompute every micro-batch's log-probs with the current
//      weights (no grad) as the PPO clip reference (with one minibatch the training forward's own
//      log-probs are that reference: no extra pass); rollout -> use the rollout log-probs.
//   for each of number_of_minibatches consecutive slices of the micro-batches:
//   1. D = sum over all micro-batches of all ranks of policy_loss_normaliser (exact, in double);
//   2. per micro-batch: model forward (log-probs, entropy) -> policy_loss share with D -> model
//      backward, gradients ACCUMULATING in the model's flat gradient buffer;
//   3. optimizer step: SUM-reduce across ranks, clip, AdamW (optimizer.h); zero the gradients.
// Every rank must pass the same number of micro-batches (the packer guarantees it; padding
// micro-batches have an all-zero loss mask). A minibatch with no trained token on any rank is
// skipped by every rank (reported, no optimizer step).
//
// Threads: one thread drives a Trainer (and its model, backend and communicators).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/observe/memory.h"
#include "common/status.h"
#include "engine/comm/communicator.h"
#include "trainer/checkpoint.h"
#include "trainer/optimizer.h"
#include "trainer/policy_loss.h"
#include "trainer/trainable_model.h"
#include "trainer/weight_sender.h"

namespace rlrun::trainer {

struct TrainerOptions {
  PolicyLossConfig loss;
  OptimizerOptions optimizer;
  int64_t number_of_minibatches = 1;
  // Learning rate of the next optimizer step, from the number of steps already taken (0-based).
  // Empty: the constant `learning_rate`.
  std::function<double(int64_t steps_taken)> learning_rate_at;
  double learning_rate = 1e-5;
  int64_t weight_broadcast_bucket_mb = 256;
  bool weight_broadcast_free_grad_buffers = false;
  bool weight_broadcast_cpu_staging = true;  // weight_comm moves host memory (Gloo); see weight_sender.h
};

// Memory of one phase. Backend bytes are the backend's allocator (device memory on cuda, heap on
// cpu); the backend only keeps a lifetime peak, so `backend_peak_bytes` is the lifetime peak at
// the end of the phase and `raised_peak` says whether this phase set it. rss_peak_bytes is the
// process's resident peak during the phase (common/observe/memory.h; the max over this step's
// minibatches), -1 without a tracker.
struct PhaseMemory {
  int64_t backend_in_use_begin = 0;
  int64_t backend_in_use_end = 0;
  int64_t backend_peak_bytes = 0;
  bool raised_peak = false;
  int64_t rss_peak_bytes = -1;
};

struct MinibatchReport {
  bool skipped_no_tokens = false;  // D = 0 on every rank
  double normaliser = 0.0;         // D
  PolicyLossResult loss;           // all ranks: loss shares summed, stats merged
  OptimizerStepStats optimizer;
};

struct StepReport {
  std::vector<MinibatchReport> minibatches;
  int64_t tokens = 0;           // tokens this rank ran through the model (padding included)
  int64_t trained_tokens = 0;   // loss-mask tokens over all ranks and minibatches
  double seconds_recompute = 0.0;  // ppo_clip_ref_logprobs: batch
  double seconds_reference = 0.0;  // kl_coef > 0: the KL reference's log-probs
  int64_t reference_tokens = 0;    // tokens this rank scored under the KL reference (not the rollout workers)
  double seconds_forward_backward = 0.0;
  double seconds_optimizer = 0.0;
  PhaseMemory memory_forward_backward;
  PhaseMemory memory_optimizer;

  // Flat metrics for TrainResult.metrics and Prometheus: loss (mean over minibatches), pg_loss,
  // kl_loss, entropy_loss, clip_low_fraction, clip_high_fraction, dual_clip_fraction,
  // tis_truncated_fraction, ratio_mean/min/max, tis_weight_mean/min/max, approx_kl, ref_kl,
  // entropy, grad_norm (mean), grad_norm_max, clip_coef_min, learning_rate (last), optimizer_steps,
  // skipped_minibatches, tokens, trained_tokens, seconds_*, memory_*_bytes.
  std::map<std::string, double> metrics() const;
};

enum class TrainObjective { kPolicy, kSupervised };

class Trainer {
 public:
  // model, trainer_comm (the trainer ranks; null for one rank), weight_comm (the weight-sync group:
  // this rank as root 0 plus every rollout worker; null on ranks other than 0 or without rollout)
  // and memory (null: no RSS figures) must outlive the Trainer.
  static Result<std::unique_ptr<Trainer>> create(const TrainerOptions& options, TrainableModel& model,
                                                 engine::Communicator* trainer_comm,
                                                 engine::Communicator* weight_comm = nullptr,
                                                 PeakMemoryTracker* memory = nullptr);

  // One trainer step over this rank's micro-batches (collective over trainer_comm). kSupervised
  // (a format warm-start batch): each micro-batch's own forward log-probs are the PPO reference,
  // so every ratio is 1 and the loss is the advantage-weighted negative log-likelihood; no TIS,
  // KL or entropy term, and rollout log-probs are ignored.
  Result<StepReport> train(std::span<const MicroBatch> micro_batches, TrainObjective objective = TrainObjective::kPolicy);

  // Trainer rank 0: broadcasts the weights (f32 on the wire) as `version` over weight_comm
  // (weight_sender.h): the model's full f32 master, or, when the distributed optimizer keeps only
  // the master of its shard, the bf16 compute weights widened (a bf16 receiver rounds either to
  // the same weights). With
  // weight_broadcast_free_grad_buffers the gradient buffer is freed for the whole send and
  // restored (zeroed) after it. Other ranks: no-op.
  Result<WeightSendReport> send_weights(uint64_t version);
  // Trainer rank 0: the weight-sync group was re-formed (a rollout worker was replaced). comm (or
  // null: no group for now) must outlive the Trainer or the next call; the next send carries the
  // layout metadata again.
  void set_weight_comm(engine::Communicator* comm);

  // kl_coef > 0: the KL reference, a model of the same config and dtype whose weights this
  // Trainer owns from now on (it never trains). At the first kPolicy step its weights become a
  // copy of the policy's (the initial policy: after any format warm-start, before the first RL
  // update), unless a checkpoint load gave it its own; from then on it scores every micro-batch
  // that comes without ref_logprobs (no gradient; those that come with them were scored by the
  // rollout workers under the same weights, version 0). Without one, kl_coef > 0 needs each
  // micro-batch's ref_logprobs. `reference` must outlive the Trainer.
  void set_reference(TrainableModel* reference);
  // Whether the reference holds the initial policy yet.
  bool reference_captured() const { return reference_captured_; }

  // Collective: checkpoint.h. keep_last = checkpoint_keep_last; exporter writes the HF model. A
  // captured KL reference is saved with it and loaded back (a checkpoint without one leaves the
  // reference to be captured at the next policy step, from the loaded weights, and says so).
  Result<std::string> save_checkpoint(const std::string& root, int64_t step, const CheckpointExtras& extras,
                                      int64_t keep_last = 2, ModelExporter exporter = {});
  Result<CheckpointInfo> load_checkpoint(const std::string& dir);

  TrainableModel& model() { return model_; }
  Optimizer& optimizer() { return *optimizer_; }
  const TrainerOptions& options() const { return options_; }
  int rank() const;

 private:
  Trainer(const TrainerOptions& options, TrainableModel& model, engine::Communicator* trainer_comm,
          engine::Communicator* weight_comm, PeakMemoryTracker* memory, std::unique_ptr<Optimizer> optimizer);
  // Validates this rank's micro-batches and agrees with every rank that all of them can train.
  Status check_batch_everywhere(std::span<const MicroBatch> micro_batches, TrainObjective objective);
  Result<std::vector<std::vector<float>>> recompute_logprobs(std::span<const MicroBatch> micro_batches);
  // The micro-batches with the KL reference's log-probs in ref_logprobs (captured first if need be);
  // those that came with them (scored by the rollout workers) are kept as they are.
  Result<std::vector<MicroBatch>> score_with_reference(std::span<const MicroBatch> micro_batches);
  Result<MinibatchReport> run_minibatch(std::span<const MicroBatch> micro_batches,
                                        const std::vector<std::vector<float>>* clip_ref, size_t first,
                                        TrainObjective objective, StepReport& report);
  Result<PolicyLossResult> run_micro_batch(const MicroBatch& mb, std::span<const float> clip_ref, double normaliser,
                                           TrainObjective objective);
  double learning_rate() const;

  TrainerOptions options_;
  TrainableModel& model_;
  engine::Communicator* trainer_comm_;
  engine::Communicator* weight_comm_;
  PeakMemoryTracker* memory_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<WeightSender> sender_;
  TrainableModel* reference_ = nullptr;
  bool reference_captured_ = false;
  int64_t reference_tokens_ = 0;  // scored by score_with_reference since the last report
};

}  // namespace rlrun::trainer
