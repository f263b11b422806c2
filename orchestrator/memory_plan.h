// memory_plan.h - the per-process memory budget of a run, computed before anything starts.
//
// Trainer rank: weights, gradients, optimizer moments and master weights (the distributed
// optimizer divides moments and master weights over the data-parallel ranks, ZeRO-1 style),
// activations of one packed micro-batch with and without gradient checkpointing, the logits /
// log-prob workspace, and the weight-send buffer. Rollout worker: weights and the KV cache pool
// (bytes per token = 2 x layers x kv_heads x head_dim x dtype bytes). All figures are bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_config.h"

namespace rlrun::orchestrator {

// Bytes per parameter of each kind of state.
struct PrecisionPolicy {
  std::string name;
  double weight_bytes;     // weights used for compute
  double grad_bytes;       // gradients
  double master_bytes;     // fp32 master copy (0 when weights are already fp32)
  double optimizer_bytes;  // AdamW first and second moments together
  double activation_bytes; // activations in compute dtype
  double kv_bytes;         // KV cache entries
};

// fp32 everywhere (the CPU backend): 4 + 4 + 0 + 8 = 16 bytes per parameter.
PrecisionPolicy fp32_policy();
// bf16 weights and gradients, fp32 master and moments: 2 + 2 + 4 + 8 = 16 bytes per parameter.
PrecisionPolicy bf16_mixed_policy();

struct TrainerPlanInputs {
  engine::ModelConfig model;
  PrecisionPolicy precision;
  int data_parallel_ranks = 1;
  bool distributed_optimizer = false;
  int64_t tokens_per_micro_batch = 1024;  // seq_len x micro_batch_rows
  bool gradient_checkpointing = false;
  int64_t weight_send_bucket_bytes = 0;   // only rank 0 sends
};

struct TrainerBudget {
  double weights = 0, gradients = 0, master_weights = 0, optimizer_moments = 0;
  double activations = 0;                 // for the configured gradient_checkpointing
  double activations_no_checkpointing = 0;
  double activations_checkpointing = 0;
  double logits_workspace = 0;
  double weight_send_buffer = 0;
  double total() const;
  // weights + gradients + master + moments: the part that does not depend on the batch
  double model_state() const { return weights + gradients + master_weights + optimizer_moments; }
};

TrainerBudget plan_trainer(const TrainerPlanInputs& in);

struct RolloutPlanInputs {
  engine::ModelConfig model;
  PrecisionPolicy precision;
  double device_bytes = 0;                 // memory of the device (GPU) the worker owns
  double gpu_memory_utilization = 0.9;     // fraction of device_bytes the worker may use (GPU)
  double kv_pool_bytes_override = 0;       // CPU: the explicit KV budget (kv_cache_memory_mb)
  int64_t max_model_len = 2048;
  int64_t max_num_seqs = 64;
  int64_t decode_workspace_tokens = 0;     // tokens of activations held during prefill (0 = max_model_len)
};

struct RolloutBudget {
  double weights = 0;
  double workspace = 0;             // activations of one prefill chunk + logits
  double kv_bytes_per_token = 0;
  double kv_pool = 0;               // bytes left for the KV cache
  int64_t sequences_that_fit = 0;   // full max_model_len sequences the pool holds
  int64_t sequences_waiting = 0;    // max_num_seqs beyond what fits: these wait in the queue
  double total() const { return weights + workspace + kv_pool; }
};

RolloutBudget plan_rollout(const RolloutPlanInputs& in);

}  // namespace rlrun::orchestrator
