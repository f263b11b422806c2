// trainable_model.h - what the trainer needs from a policy model, and one packed micro-batch.
//
// The trainer drives any model through this interface: the Llama decoder (model_adapter.h wraps
// engine::Model) or a test double. Parameters and gradients are each ONE flat f32 buffer on the
// model's backend (plus compute-dtype weights: weights_flat()); `param_specs()` names the tensors inside them (HF names, shapes, element
// offsets), which the optimizer (weight-decay ranges), checkpoints and weight sync use.
// Threads: one thread drives a model at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/comm/weight_sync.h"
#include "trainer/optimizer.h"

namespace rlrun::trainer {

// A tensor inside the flat buffers: HF name, shape, element offset, numel (engine/comm/weight_sync.h).
using ParamSpec = engine::FlatTensor;

// Weight decay for matrices and embeddings (rank >= 2), none for norms and biases.
std::vector<ParamRange> decay_ranges(std::span<const ParamSpec> specs);

// One packed micro-batch on the host: N tokens of S whole sequences, arrays aligned with the
// PREDICTIONS: at index t the model reads input_ids[t] at position_ids[t] and predicts targets[t]
// (the next token of the same sequence, or < 0 for none: a sequence's last token, an untrained
// prediction, whose log-prob the head need not compute).
// loss_mask[t] = 1 trains that prediction; rollout_logprobs[t] is the behaviour policy's
// log-prob of targets[t]. make_micro_batch() builds one from token-aligned arrays.
struct MicroBatch {
  std::vector<int32_t> input_ids;         // (N)
  std::vector<int32_t> position_ids;      // (N) restart at 0 per sequence
  std::vector<int32_t> cu_seqlens;        // (S + 1), cu[0] = 0, cu[S] = N
  std::vector<int32_t> targets;           // (N)
  std::vector<uint8_t> loss_mask;         // (N)
  std::vector<float> advantages;          // (S) per sequence, or (N) per prediction
  std::vector<float> rollout_logprobs;    // (N); 0 where unmasked
  std::vector<float> ref_logprobs;        // (N) KL reference, or empty when kl_coef = 0
  // (S) or empty: prefix_of[s] = p when sequence s continues sequence p (p < s; the samples of
  // one prompt after that prompt, computed once: engine::PackedBatch::prefix_of; p may continue
  // another: share_common_prefix). A prefix trains no token of its own.
  std::vector<int32_t> prefix_of;

  int64_t num_tokens() const { return static_cast<int64_t>(input_ids.size()); }
};

// Token-aligned inputs as the packer/protocol carry them (loss_mask[t] = 1 for a completion token
// t, rollout_logprobs[t] its log-prob, advantages per sequence (S) or per token (N), ref_logprobs
// (N) the KL reference's log-probs or empty) shifted into
// a MicroBatch: prediction t of a sequence targets token t + 1 with that token's mask, log-prob
// and (per-token) advantage (an untrained one has no target); each sequence's last prediction has
// no target (a prompt shared by
// continuations ends one token early: each continuation starts with that token). invalid_argument
// on inconsistent sizes or cu_seqlens.
Result<MicroBatch> make_micro_batch(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                    std::span<const int32_t> cu_seqlens, std::span<const uint8_t> loss_mask,
                                    std::span<const float> advantages, std::span<const float> rollout_logprobs,
                                    std::span<const int32_t> prefix_of = {}, std::span<const float> ref_logprobs = {});

// Removes the sequences that train no token and that no trained sequence continues (padding,
// samples left without a trained token): their attention is confined to themselves, so they
// change no gradient, and computing them is waste.
void drop_untrained_sequences(MicroBatch& mb);

// The prompts of different groups often begin alike (a chat template's system prompt, a task's
// fixed instructions): the longest start common to every shared prompt (a segment that others
// continue and that continues none) becomes a segment of its own, computed once, that each of
// those prompts continues. Nothing changes with fewer than two such prompts or no common start
// (each prompt keeps at least one token). The loss and its gradients are the same.
void share_common_prefix(MicroBatch& mb);

// The same micro-batch with every shared prefix written out before each of its continuations
// (prefix_of empty): what a model that cannot share prefixes trains on, with the same loss.
MicroBatch expand_shared_prefixes(const MicroBatch& mb);

// invalid_argument naming the array at fault unless every array has its documented size,
// cu_seqlens is valid, advantages and trained tokens' rollout (and reference) log-probs are finite
// and (with_ref) ref_logprobs is present. Token ids are the model's to check.
Status validate_micro_batch(const MicroBatch& mb, bool with_ref);

struct ModelForward {
  engine::Tensor logprobs;  // (N, f32) on the backend: log p(targets[t]); 0 where target < 0
  engine::Tensor entropy;   // (N, f32) entropy of each predicted distribution (nats)
};

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  virtual engine::Backend& backend() = 0;
  virtual const std::vector<ParamSpec>& param_specs() const = 0;
  virtual int64_t flat_size() const = 0;

  // f32 (P): the full master weights; undefined after release_master() frees a separate copy.
  virtual const engine::Tensor& params_flat() = 0;
  // (P) in the compute dtype (f32 or bf16): what forward reads; the optimizer writes its update
  // here. The same tensor as params_flat() when the compute dtype is f32.
  virtual const engine::Tensor& weights_flat() = 0;
  // Frees params_flat() when it is a copy apart from weights_flat() (the distributed optimizer
  // then keeps the master of its shard: optimizer.h); a no-op otherwise.
  virtual void release_master() = 0;
  // Called after params_flat() / weights_flat() were written from outside (an optimizer step, a
  // checkpoint load, the KL reference's copy): refreshes what the model derives from them (the
  // bf16 matrices of compute_dtype: bf16 on a CPU, model/weights.h kBf16Cache).
  virtual void weights_written() {}

  virtual bool has_grads() const = 0;
  virtual const engine::Tensor& grads_flat() = 0;  // f32 (P); aborts when released
  virtual void zero_grads() = 0;
  virtual void release_grads() = 0;  // frees the gradient memory (backend raw_free)
  virtual void restore_grads() = 0;  // allocates it again, zeroed

  // Untrusted input: invalid_argument for bad ids/shapes. for_backward = false keeps nothing.
  virtual Result<ModelForward> forward(const MicroBatch& batch, bool for_backward) = 0;
  // Whether forward() takes micro-batches with prefix_of; the trainer expands them otherwise.
  virtual bool shares_prefixes() const { return false; }
  // d(loss)/d(logprob) and d(loss)/d(entropy) (N, f32; dentropy may be undefined); ACCUMULATES
  // into grads_flat(). Must follow forward(for_backward = true).
  virtual void backward(const engine::Tensor& dlogprob, const engine::Tensor& dentropy) = 0;
};

}  // namespace rlrun::trainer
