// memory_plan.h - the per-process memory budget of a run, computed before anything starts.
//
// Trainer rank: weights, gradients, optimizer moments and master weights (the distributed
// optimizer divides moments and master over the data-parallel ranks, ZeRO-1 style, and keeps the
// reduce-scattered gradient shard in a buffer of its own: trainer/optimizer.h), activations of
// one packed micro-batch with and without gradient checkpointing, the logits / log-prob
// workspace, and the weight-send buffer. Rollout worker: weights and the KV cache pool
// (bytes per token = 2 x layers x kv_heads x head_dim x dtype bytes). All figures are bytes.
//
// Activations are the engine's exact count (engine::estimate_saved_activation_bytes: what a
// training forward keeps until backward) plus the backward scratch the engine allocates
// (engine/model/train.cc / engine/model/layer.cc), so on the CPU backend the forward/backward peak of the plan
// equals Backend::peak_bytes() of a real step up to the few i32 index tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/config.h"

namespace rlrun::orchestrator {

// Bytes per parameter of each kind of state.
struct PrecisionPolicy {
  std::string name;
  double weight_bytes;     // weights used for compute
  double grad_bytes;       // gradients
  double master_bytes;     // fp32 master copy (0 when weights are already fp32: they are the master)
  double optimizer_bytes;  // AdamW first and second moments together
  double activation_bytes; // activations in compute dtype (4 = f32, 2 = bf16)
  double kv_bytes;         // KV cache entries
  // Bytes per parameter a rollout worker holds; 0 = weight_bytes. rlrun's worker keeps the f32
  // master copy beside bf16 compute weights (the weight update receives into it): 6.
  double inference_weight_bytes = 0;
  // Bytes per parameter of the trainer's KL reference copy; 0 = weight_bytes (reference_bytes()).
  double reference_weight_bytes = 0;
  // Whether the distributed optimizer shards the master (it does where the weights are bf16 and
  // the master a copy apart; not where the model keeps its f32 master beside bf16 matrices).
  bool master_shards = true;

  double reference_bytes() const { return reference_weight_bytes > 0 ? reference_weight_bytes : weight_bytes; }
};

// fp32 everywhere (the CPU backend): 4 + 4 + 0 + 8 = 16 bytes per parameter.
PrecisionPolicy fp32_policy();
// The published bf16 mixed precision: bf16 weights and gradients, fp32 master and moments:
// 2 + 2 + 4 + 8 = 16 bytes per parameter.
PrecisionPolicy bf16_mixed_policy();
// What rlrun's engine keeps on a bf16 backend (engine/model/weights.h: gradients are f32, like
// Megatron's grad_reduce_in_fp32; no backend accumulates bf16 gradients): 2 + 4 + 4 + 8 = 18
// bytes per parameter, 2 + 4 + 12 / N with the distributed optimizer on N ranks (+ its gradient
// shard, 4 / N). A rollout worker holds 4 + 2 bytes per parameter.
PrecisionPolicy engine_bf16_policy();
// compute_dtype: bf16 on a CPU (engine/model/weights.h kBf16Cache): the f32 master and gradients
// beside bf16 matrices for the products, f32 activations: 2 + 4 + 4 + 8 = 18 bytes per trained
// parameter; the KL reference keeps both copies too (6); a rollout worker f32 (4).
PrecisionPolicy cpu_bf16_cache_policy();

struct TrainerPlanInputs {
  engine::ModelConfig model;
  PrecisionPolicy precision;
  int data_parallel_ranks = 1;
  bool distributed_optimizer = false;
  // The distributed optimizer reduce-scatters the gradients into a shard buffer of its own
  // (grad_bytes / ranks per parameter: rlrun's trainer, which owns no padded gradient buffer);
  // false: in place, as the published ZeRO-1 arithmetic counts it.
  bool gradient_shard_buffer = true;
  int64_t tokens_per_micro_batch = 1024;  // seq_len x micro_batch_rows
  bool gradient_checkpointing = false;
  int64_t weight_send_bucket_bytes = 0;   // device bytes of the send buffer (rank 0 only)
  int64_t logits_chunk_elements = int64_t{1} << 24;  // engine::ModelOptions::logits_chunk_elements
  bool kl_reference = false;  // kl_coef > 0: a frozen copy of the weights (compute dtype) per rank
  // lora_rank > 0: the adapters' f32 elements (padding included). They alone carry gradients,
  // master copies and AdamW moments, the KL reference is an adapter copy, and the base weights
  // are frozen (weights only).
  double lora_parameters = 0;
};

struct TrainerBudget {
  double weights = 0, gradients = 0, master_weights = 0, optimizer_moments = 0;
  double gradient_shard = 0;  // the distributed optimizer's reduce-scatter output
  double reference_weights = 0;  // kl_coef > 0: the KL reference (trainer/train_step.h set_reference)
  // Activations kept from forward to backward (logits excluded: they are in logits_workspace)
  // plus the backward scratch, for the configured gradient_checkpointing ...
  double activations = 0;
  // ... and for each setting.
  double activations_no_checkpointing = 0;
  double activations_checkpointing = 0;
  double backward_scratch = 0;       // the scratch part of `activations`
  double logits_workspace = 0;       // logits chunk (tokens x vocab) + per-token f32 outputs
  double weight_send_buffer = 0;
  // weights + gradients + master + moments + gradient shard + KL reference: the part that does not
  // depend on the batch
  double model_state() const {
    return weights + gradients + master_weights + optimizer_moments + gradient_shard + reference_weights;
  }
  // Peaks by phase: the activations are gone before the optimizer step and the weight send.
  double forward_backward_peak() const { return model_state() + activations + logits_workspace; }
  double weight_send_peak() const { return model_state() + weight_send_buffer; }
  double peak() const;
  // Every line added up (an upper bound on peak()).
  double total() const;
};

TrainerBudget plan_trainer(const TrainerPlanInputs& in);
// The model-state lines alone (weights, gradients, master, moments, gradient shard, reference) of `params`
// parameters; plan_trainer() fills them with this. Activations and workspaces stay 0.
TrainerBudget plan_model_state(double params, const TrainerPlanInputs& in);

struct RolloutPlanInputs {
  engine::ModelConfig model;
  PrecisionPolicy precision;
  double device_bytes = 0;                 // memory of the device (GPU) the worker owns
  double gpu_memory_utilization = 0.9;     // fraction of device_bytes the worker may use (GPU)
  double kv_pool_bytes_override = 0;       // CPU: the explicit KV budget (kv_cache_memory_mb)
  int64_t max_model_len = 2048;
  int64_t max_num_seqs = 64;
  int64_t decode_workspace_tokens = 0;     // tokens of activations held during prefill (0 = max_model_len)
  int64_t kv_block_size = 0;               // tokens per KV block; 0 = count in tokens, not blocks
  int tensor_parallel_size = 1;            // weights and KV heads are split over this many GPUs
  double weight_receive_buffer_bytes = 0;  // device bytes the weight update needs beyond the weights
  double runtime_reserve_bytes = 0;        // GPU: inside the utilization share but outside the allocator
  bool kl_reference = false;               // kl_reference_on: rollout: a copy of the compute weights
  double lora_parameters = 0;              // lora_rank > 0: the adapters' f32 elements beside the weights
};

struct RolloutBudget {
  double weights = 0;
  double reference_weights = 0;     // kl_reference_on: rollout (rollout/kl_reference.h)
  double weight_receive_buffer = 0;
  double workspace = 0;             // activations of one prefill chunk + logits
  double kv_bytes_per_token = 0;    // per GPU of the server
  double kv_bytes_per_sequence = 0; // one max_model_len sequence (whole blocks)
  double kv_pool = 0;               // bytes of the KV cache
  int64_t sequences_that_fit = 0;   // full max_model_len sequences the pool holds
  int64_t sequences_waiting = 0;    // max_num_seqs beyond what fits: these wait in the queue
  double total() const { return weights + reference_weights + weight_receive_buffer + workspace + kv_pool; }
};

RolloutBudget plan_rollout(const RolloutPlanInputs& in);

}  // namespace rlrun::orchestrator
