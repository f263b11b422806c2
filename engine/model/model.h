// model.h - the Llama-family decoder (Llama, Qwen2, SmolLM2), written once against Backend.
//
// Training works on PACKED micro-batches: N tokens of several sequences in one row, positions
// restarting at 0 per sequence, attention confined to each sequence (cu_seqlens), and a target
// per token (the next token id, or < 0 for none; the caller shifts and masks). forward() returns
// per-token log-probabilities of the targets and the entropy of each predicted distribution (0 for
// tokens without a target: the output layer scores only the others);
// backward() takes d(loss)/d(logprob) (and optionally d(loss)/d(entropy)) and ACCUMULATES the
// parameter gradients into weights().grad_flat(). Losses live in the trainer.
//
// Inference runs over a paged KvCache (kv_cache.h): prefill and decode are the same call,
// forward_cached(), which appends each sequence's new tokens after what the cache holds and
// returns the logits of each sequence's last new token.
//
// Memory: forward(for_backward = true) keeps every layer's activations until backward(), or, with
// gradient checkpointing, only each layer's input (the layer is recomputed in backward). Logits
// are materialised at most `logits_chunk_elements` (tokens x vocab) at a time.
//
// Threads: one thread drives a Model (and its Backend) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/config.h"
#include "engine/model/lora.h"
#include "engine/model/weights.h"

namespace rlrun::engine {

struct LayerRope;  // model/layer.h
struct LayerLora;  // model/layer.h

struct ModelOptions {
  bool gradient_checkpointing = false;
  // kBf16Frozen (base_weights_dtype: bf16): the weight matrices in bf16 only, for a model that
  // never trains its base (a LoRA base, a rollout worker): model/weights.h. Needs an f32 compute
  // dtype (the CPU backend).
  WeightStorage weight_storage = WeightStorage::kF32;
  int64_t logits_chunk_elements = int64_t{1} << 24;  // 64 MiB of f32 logits
};

// One packed micro-batch on the host. Untrusted: forward() validates it.
//
// Shared prefixes: the samples of one prompt need not repeat it. prefix_of[s] = p says segment s
// CONTINUES segment p (p < s): s attends to all of p's tokens (and to those of the segments p
// continues, a chain: e.g. a system prompt, then each group's question, then each sample), then
// causally to its own, and its positions go on from p's (positions[cu[s]] = p's last + 1).
// Several segments may continue one prefix; its tokens are computed once and collect the
// gradients of all of them. Empty prefix_of: every segment stands alone. Needs an f32 compute
// dtype (other backends: expand the batch first).
struct PackedBatch {
  std::span<const int32_t> tokens;      // (N) ids in [0, vocab)
  std::span<const int32_t> positions;   // (N) >= 0, restarting at 0 per sequence
  std::span<const int32_t> cu_seqlens;  // (S+1): 0 = cu[0] < cu[1] < ... < cu[S] = N
  std::span<const int32_t> targets;     // (N) next-token ids in [0, vocab), or < 0 for none
  std::span<const int32_t> prefix_of = {};  // (S) or empty: see above; -1 = none
};

struct ForwardOutput {
  Tensor logprobs;  // (N, f32) on the backend; 0 where the target is < 0
  Tensor entropy;   // (N, f32)
};

// Checks a config can be built (head counts divide, head_dim even, sizes positive).
Status validate_model_config(const ModelConfig& config);

class Model {
 public:
  // Weights are zero until init_random() or a checkpoint load into weights().
  static Result<std::unique_ptr<Model>> create(Backend& backend, const ModelConfig& config,
                                               ModelOptions options = {});
  ~Model();

  const ModelConfig& config() const { return weights_.config(); }
  Backend& backend() const { return weights_.backend(); }
  ModelWeights& weights() { return weights_; }
  const ModelWeights& weights() const { return weights_; }
  const ModelOptions& options() const { return options_; }
  void set_gradient_checkpointing(bool on) { options_.gradient_checkpointing = on; }

  // ---- training ----
  // for_backward = false (scoring, e.g. reference log-probs) keeps nothing after returning.
  Result<ForwardOutput> forward(const PackedBatch& batch, bool for_backward = true);
  // dlogprob, dentropy: (N, f32) on the backend; dentropy may be undefined. Must follow a
  // forward(for_backward = true) and consumes its saved activations. Grads must be present.
  void backward(const Tensor& dlogprob, const Tensor& dentropy = Tensor());
  // Bytes of activations held between the last forward and backward (0 after backward).
  int64_t saved_activation_bytes() const;

  // ---- low-rank adapters (model/lora.h) ----
  // Attaches `lora` (borrowed: it must outlive the model, or be detached with nullptr; made for
  // this model's config). Then forward (training and inference) adds the adapters' terms, backward
  // accumulates their gradients into lora->grad_flat(), and the base weights are FROZEN: backward
  // writes no base gradient, so weights().release_grads() may free that buffer.
  // invalid_argument when the compute dtype is not f32 (the adapters are f32) or the shapes differ.
  Status attach_lora(LoraWeights* lora);
  LoraWeights* lora() const { return lora_; }
  // Off: forward computes the base model alone (the KL reference, with no copy of the weights);
  // the base stays frozen. On by default.
  void set_lora_enabled(bool on) { lora_enabled_ = on; }
  bool lora_enabled() const { return lora_enabled_; }

  // ---- inference over a paged KV cache ----
  // For each seqs[s] (already added to the cache), appends the tokens
  // tokens[cu_new[s] .. cu_new[s+1]) (at least one) at positions length(s), length(s) + 1, ...
  // and returns logits (S, V) of each sequence's last new token (compute dtype).
  // resource_exhausted (nothing changed) when the cache lacks blocks; invalid_argument for bad
  // ids or sequences. Prefill: new sequences with their whole prompts. Decode: one token each.
  Result<Tensor> forward_cached(KvCache& cache, std::span<const SeqId> seqs, std::span<const int32_t> tokens,
                                std::span<const int32_t> cu_new);
  // Decode convenience: one new token per sequence.
  Result<Tensor> decode(KvCache& cache, std::span<const SeqId> seqs, std::span<const int32_t> tokens);

 private:
  struct TrainState;  // saved activations between forward and backward (model/train.cc)
  Model(Backend& backend, const ModelConfig& config, ModelOptions options);
  Status validate(const PackedBatch& batch) const;
  // final norm + lm_head + fused log-softmax over chunks of tokens (model/train.cc)
  void head_forward(TrainState& st, const ForwardOutput& out, bool for_backward);
  void head_backward(TrainState& st, const Tensor& dlogprob, const Tensor& dentropy, const Tensor& dx);
  // Backward through layer l, recomputing it first when checkpointing.
  void layer_backward_at(TrainState& st, int64_t l, const Tensor& dx);
  // Layer l's adapters as the layer ops take them (none when detached or disabled); with_grads:
  // their gradient views too.
  LayerLora layer_lora(int64_t l, bool with_grads) const;
  bool base_frozen() const { return lora_ != nullptr; }

  ModelWeights weights_;
  std::vector<LayerRope> ropes_;  // per layer (model/layer.h)
  ModelOptions options_;
  std::unique_ptr<TrainState> state_;
  LoraWeights* lora_ = nullptr;
  bool lora_enabled_ = true;
};

// Bytes a forward(for_backward = true) of `tokens` tokens keeps until backward (what
// saved_activation_bytes() reports), for `rlrun plan`. Backward adds about one layer's
// activations when checkpointing, plus gradient scratch of a few (tokens, hidden) tensors.
// `scored`: tokens with a target (the head scores only those on f32 backends); < 0: all of them,
// the bound a plan uses.
int64_t estimate_saved_activation_bytes(const ModelConfig& config, int64_t tokens, DType compute_dtype,
                                        bool checkpointing, int64_t logits_chunk_elements = int64_t{1} << 24,
                                        int64_t scored = -1);

// ---- conveniences for tests and tools --------------------------------------------------------
// Mean negative log-likelihood over tokens with a target >= 0 (no gradients kept).
Result<double> mean_nll(Model& model, const PackedBatch& batch);
// The same, and accumulates its gradient (d logprob = -1 / count) into the model's grads.
Result<double> mean_nll_backward(Model& model, const PackedBatch& batch);

}  // namespace rlrun::engine
