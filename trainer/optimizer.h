// optimizer.h - AdamW over the model's flat parameter buffer, with gradient reduction across
// trainer ranks, global-norm clipping and the distributed (ZeRO-1) optimizer.
//
// One step (after gradients were accumulated over all micro-batches of a minibatch):
//   plain        all-reduce SUM the whole gradient; every rank computes the norm, clips and
//                updates all P elements (moments for all P).
//   distributed  (use_distributed_optimizer, ZeRO-1) reduce-scatter SUM the gradient: rank r owns
//                the contiguous shard [r q, (r+1) q) with q = floor(P / R); norm = sqrt of the
//                all-ranks sum of shard squares; clip; AdamW on the shard only (moments for the
//                shard only: state / R); all-gather the updated shards into every rank's weights.
//                Instead of padding P to a multiple of R (which would need a second, padded
//                P-sized gradient buffer: the model owns an unpadded one), the t = P - R q < R
//                trailing elements are all-reduced and owned by rank 0, which updates them and
//                broadcasts them back.
// Master weights: AdamW updates the f32 master of the owned elements, and the compute weights the
// model reads (its `weights`, P elements of the model's compute dtype) receive the update:
//   f32 weights (the CPU backend)  the weights ARE the master (`params` and `weights` are one
//                                  tensor): updated in place, no copy anywhere.
//   bf16 weights, plain            the model keeps the full f32 master (`params`); the update is
//                                  rounded into `weights`.
//   bf16 weights, distributed      (keeps_master()) the optimizer keeps the f32 master of its owned
//                                  elements only, 4 P / R bytes (Megatron's distributed optimizer,
//                                  ZeRO-1): the model releases its full master; the updated shards
//                                  are rounded into `weights` and all-gathered as bf16.
// Per rank then, bytes per parameter: weights (4 or 2) + gradients 4 + moments 8 / R + master
// (0 for f32 weights, 4 bf16 plain, 4 / R bf16 distributed) + the reduce-scatter output 4 / R
// (distributed only), R = 1 for plain: what orchestrator/plan/memory_plan.h plans.
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
  // flat_size P > 0; `ranges` mark decayed elements (uncovered elements are not decayed);
  // weight_dtype: the model's compute weights, f32 or bf16. backend and comm must outlive the
  // optimizer. With keeps_master() its master starts at zero: init_master() or
  // copy_master_from_host() fill it.
  static Result<std::unique_ptr<Optimizer>> create(engine::Backend& backend, int64_t flat_size,
                                                   std::vector<ParamRange> ranges,
                                                   const OptimizerOptions& options,
                                                   engine::Communicator* comm,
                                                   engine::DType weight_dtype = engine::DType::kF32);

  // Reduces `grads` (f32 (P)) across ranks, clips, updates the master with learning rate `lr` and
  // writes the result into `weights` (weight_dtype (P)). `params` is the model's full f32 master
  // (P; the same tensor as `weights` when they are f32), ignored with keeps_master(). Afterwards
  // `grads` holds garbage (partially reduced); zero it before the next accumulation. Errors are
  // collective failures (a dead peer).
  Result<OptimizerStepStats> step(const engine::Tensor& params, const engine::Tensor& weights,
                                  const engine::Tensor& grads, double lr);
  // f32 weights: step(params, params, grads, lr).
  Result<OptimizerStepStats> step(const engine::Tensor& params, const engine::Tensor& grads, double lr) {
    return step(params, params, grads, lr);
  }

  int64_t step_count() const { return step_; }
  bool sharded() const { return sharded_; }
  // The optimizer holds the f32 master of its owned ranges (bf16 weights, distributed).
  bool keeps_master() const { return master_.defined(); }
  // What keeps_master() will be for these options on `ranks` ranks with weights of `weight_dtype`.
  static bool keeps_master(const OptimizerOptions& options, int ranks, engine::DType weight_dtype) {
    return options.use_distributed_optimizer && ranks > 1 && weight_dtype != engine::DType::kF32;
  }
  // keeps_master(): copies the owned ranges of the full f32 master `params` (P) into its own.
  void init_master(const engine::Tensor& params);
  // Host copies of the f32 master of global elements [begin, end) inside one owned range: the
  // optimizer's own with keeps_master(), else `params`'s (the model's full master).
  void copy_master_to_host(const engine::Tensor& params, int64_t begin, int64_t end, float* out) const;
  // keeps_master() only: sets the optimizer's master of [begin, end) inside one owned range.
  void copy_master_from_host(int64_t begin, int64_t end, const float* in);
  // Global element ranges this rank updates (shard, then rank 0's tail).
  const std::vector<std::pair<int64_t, int64_t>>& owned_ranges() const { return owned_; }
  // Bytes of optimizer state and scratch on the backend (moments + master + gradient shard).
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
            const OptimizerOptions& options, engine::Communicator* comm, engine::DType weight_dtype);
  Status reduce(const engine::Tensor& grads);
  Result<double> global_norm(const engine::Tensor& grads);
  // The owned gradient elements of range i: a view of the shard buffer or of `grads`.
  engine::Tensor owned_grad(const engine::Tensor& grads, size_t i) const;
  // The f32 master of owned range i: a view of master_ or of `params`.
  engine::Tensor owned_master(const engine::Tensor& params, size_t i) const;
  void apply_adamw(const engine::Tensor& params, const engine::Tensor& grads, double lr);
  // Rounds each updated owned master range into `weights` (nothing when they share storage).
  void write_back(const engine::Tensor& params, const engine::Tensor& weights);
  Status gather(const engine::Tensor& weights);

  engine::Backend& backend_;
  int64_t flat_size_;
  std::vector<ParamRange> cover_;  // a sorted cover of [0, P), adjacent ranges differ in decay
  OptimizerOptions options_;
  engine::Communicator* comm_;
  bool sharded_ = false;
  int64_t shard_ = 0;       // q: elements per rank's shard (sharded only)
  int64_t tail_begin_ = 0;  // R q (sharded only)
  engine::DType weight_dtype_;
  std::vector<std::pair<int64_t, int64_t>> owned_;
  std::vector<int64_t> owned_at_;  // offset of owned range i in m_, v_ and master_
  engine::Tensor m_, v_;         // (sum of owned lengths) f32
  engine::Tensor master_;        // (sum of owned lengths) f32, keeps_master() only
  engine::Tensor grad_shard_;    // (q) f32, sharded only; lends its bytes to all_gather's input
  int64_t step_ = 0;
};

}  // namespace rlrun::trainer
