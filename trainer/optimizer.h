// optimizer.h - AdamW over the model's flat f32 parameter buffer, with gradient reduction across
// trainer ranks, global-norm clipping and the distributed (ZeRO-1) optimizer.
//
// One step (after gradients were accumulated over all micro-batches of a minibatch):
//   plain        all-reduce SUM the whole gradient; every rank computes the norm, clips and
//                updates all P elements (moments for all P).
//   distributed  (use_distributed_optimizer, ZeRO-1) reduce-scatter SUM the gradient: rank r owns
//                the contiguous shard [r q, (r+1) q) with q = floor(P / R); norm = sqrt of the
//                all-ranks sum of shard squares; clip; AdamW on the shard only (moments for the
//                shard only: state / R); all-gather the updated shards into every rank's params.
//                Instead of padding P to a multiple of R (which would need a second, padded
//                P-sized gradient buffer: the model owns an unpadded one), the t = P - R q < R
//                trailing elements are all-reduced and owned by rank 0, which updates them and
//                broadcasts them back.
// The reduction is a SUM (trainer/policy_loss.h: micro-batch losses are shares of a global
// normaliser, so summed gradients are the minibatch gradient). Clipping: if grad_clip > 0 and
// norm > grad_clip, gradients are scaled by grad_clip / (norm + 1e-6) (Megatron's rule). A
// non-finite norm skips the update on every rank (all agree: the norm is global) and is reported.
// Weight decay is decoupled and applies to ranges marked `decay` (matrices and embeddings);
// norms, biases and alignment padding are exempt.
//
// Collectives use the tensors' data() pointers, so `comm` must be a communicator for this
// backend's memory (Gloo for cpu, NCCL for cuda). `comm` may be null (one rank).
// Threads: the thread driving the backend; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/comm/communicator.h"

namespace rlrun::trainer {

struct OptimizerOptions {
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 1.0;  // 0 = off
  bool use_distributed_optimizer = false;
};

// Elements [begin, end) of the flat buffer; `decay` selects weight decay.
struct ParamRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool decay = false;
};

struct OptimizerStepStats {
  double grad_norm = 0.0;     // global L2 norm of the reduced gradient, before clipping
  double clip_coef = 1.0;     // factor applied to the gradient (1 = not clipped)
  double learning_rate = 0.0;
  bool skipped = false;       // non-finite norm: weights and moments unchanged
  int64_t step = 0;           // optimizer steps taken, after this one
};

// The moments this rank holds, for checkpoints. ranges are global element ranges of the flat
// buffer in the order m and v concatenate them.
struct OptimizerState {
  int64_t step = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<float> m, v;
};

class Optimizer {
 public:
  // flat_size P > 0; `ranges` mark decayed elements (uncovered elements are not decayed).
  // backend and comm must outlive the optimizer.
  static Result<std::unique_ptr<Optimizer>> create(engine::Backend& backend, int64_t flat_size,
                                                   std::vector<ParamRange> ranges,
                                                   const OptimizerOptions& options,
                                                   engine::Communicator* comm);

  // Reduces `grads` across ranks, clips, updates `params` (both f32 (P) on the backend) with
  // learning rate `lr`. Afterwards `grads` holds garbage (partially reduced); zero it before the
  // next accumulation. Errors are collective failures (a dead peer).
  Result<OptimizerStepStats> step(const engine::Tensor& params, const engine::Tensor& grads, double lr);

  int64_t step_count() const { return step_; }
  bool sharded() const { return sharded_; }
  // Global element ranges this rank updates (shard, then rank 0's tail).
  const std::vector<std::pair<int64_t, int64_t>>& owned_ranges() const { return owned_; }
  // Bytes of optimizer state and scratch on the backend (moments + gradient shard).
  size_t state_bytes() const;

  // The owned ranges of `rank` for a group of `ranks` (what owned_ranges() is on that rank).
  static std::vector<std::pair<int64_t, int64_t>> owned_ranges_of(int rank, int ranks, int64_t flat_size,
                                                                  bool use_distributed_optimizer);
  // Host copies of the moments of global elements [begin, end), which must lie inside one owned
  // range (checkpoints stream them in chunks). m and v hold end - begin floats.
  void copy_moments_to_host(int64_t begin, int64_t end, float* m, float* v) const;
  void copy_moments_from_host(int64_t begin, int64_t end, const float* m, const float* v);
  void set_step_count(int64_t step) { step_ = step; }

  OptimizerState state() const;
  // invalid_argument unless state.ranges equal owned_ranges() (same P, ranks and mode) and the
  // moment sizes match.
  Status load_state(const OptimizerState& state);

 private:
  Optimizer(engine::Backend& backend, int64_t flat_size, std::vector<ParamRange> cover,
            const OptimizerOptions& options, engine::Communicator* comm);
  Status reduce(const engine::Tensor& grads);
  Result<double> global_norm(const engine::Tensor& grads);
  // The owned gradient elements of range i: a view of the shard buffer or of `grads`.
  engine::Tensor owned_grad(const engine::Tensor& grads, size_t i) const;
  void apply_adamw(const engine::Tensor& params, const engine::Tensor& grads, double lr);
  Status gather(const engine::Tensor& params);

  engine::Backend& backend_;
  int64_t flat_size_;
  std::vector<ParamRange> cover_;  // a sorted cover of [0, P), adjacent ranges differ in decay
  OptimizerOptions options_;
  engine::Communicator* comm_;
  bool sharded_ = false;
  int64_t shard_ = 0;       // q: elements per rank's shard (sharded only)
  int64_t tail_begin_ = 0;  // R q (sharded only)
  std::vector<std::pair<int64_t, int64_t>> owned_;
  engine::Tensor m_, v_;         // (sum of owned lengths) f32
  engine::Tensor grad_shard_;    // (q) f32, sharded only
  int64_t step_ = 0;
};

}  // namespace rlrun::trainer
