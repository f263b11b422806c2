#include "orchestrator/memory_plan.h"

#include <algorithm>
#include <cmath>

namespace rlrun::orchestrator {

PrecisionPolicy fp32_policy() { return {"fp32", 4, 4, 0, 8, 4, 4}; }
PrecisionPolicy bf16_mixed_policy() { return {"bf16-mixed", 2, 2, 4, 8, 2, 2}; }

double TrainerBudget::total() const {
  return model_state() + activations + logits_workspace + weight_send_buffer;
}

namespace {

// Activation elements saved per token by one decoder layer for backward (engine/model):
// the layer input, both RMSNorm outputs, q/k/v after RoPE, the attention output, the residual
// after attention, and the MLP's gate, up and SwiGLU output. The small f32 statistics
// (two rstd, one lse per query head) are counted as compute-dtype elements for simplicity.
double layer_elements_per_token(const engine::ModelConfig& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double kv = static_cast<double>(m.num_kv_heads * m.head_dim());
  const double i = static_cast<double>(m.intermediate_size);
  return 5 * h + 2 * kv + 3 * i + 2 + static_cast<double>(m.num_heads);
}

// Transient activation gradients alive while one layer runs backward: dx for the residual
// stream and the largest intermediate (the MLP's), plus the attention gradients dq/dk/dv.
double backward_transient_elements_per_token(const engine::ModelConfig& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double kv = static_cast<double>(m.num_kv_heads * m.head_dim());
  const double i = static_cast<double>(m.intermediate_size);
  return 2 * h + 2 * i + h + 2 * kv;
}

}  // namespace

TrainerBudget plan_trainer(const TrainerPlanInputs& in) {
  const double params = static_cast<double>(in.model.num_parameters());
  const double shard = in.distributed_optimizer ? static_cast<double>(std::max(1, in.data_parallel_ranks)) : 1.0;
  const PrecisionPolicy& p = in.precision;
  TrainerBudget b;
  b.weights = params * p.weight_bytes;
  b.gradients = params * p.grad_bytes;
  b.master_weights = params * p.master_bytes / shard;
  b.optimizer_moments = params * p.optimizer_bytes / shard;

  const double t = static_cast<double>(in.tokens_per_micro_batch);
  const double layers = static_cast<double>(in.model.num_layers);
  const double per_layer = layer_elements_per_token(in.model) * t * p.activation_bytes;
  const double transient = backward_transient_elements_per_token(in.model) * t * p.activation_bytes;
  const double final_norm = 2.0 * static_cast<double>(in.model.hidden_size) * t * p.activation_bytes;
  b.activations_no_checkpointing = layers * per_layer + transient + final_norm;
  // checkpointing keeps each layer's input, and recomputes one layer at a time in backward
  b.activations_checkpointing =
      layers * static_cast<double>(in.model.hidden_size) * t * p.activation_bytes + per_layer + transient + final_norm;
  b.activations = in.gradient_checkpointing ? b.activations_checkpointing : b.activations_no_checkpointing;
  // logits (T, V) in f32, overwritten in place by their gradient; per-token logprob/entropy/lse
  b.logits_workspace = t * static_cast<double>(in.model.vocab_size) * 4.0 + t * 3 * 4.0;
  b.weight_send_buffer = static_cast<double>(in.weight_send_bucket_bytes);
  return b;
}

RolloutBudget plan_rollout(const RolloutPlanInputs& in) {
  const engine::ModelConfig& m = in.model;
  const PrecisionPolicy& p = in.precision;
  RolloutBudget b;
  b.weights = static_cast<double>(m.num_parameters()) * p.weight_bytes;
  b.kv_bytes_per_token = 2.0 * static_cast<double>(m.num_layers * m.num_kv_heads * m.head_dim()) * p.kv_bytes;
  const double chunk = static_cast<double>(in.decode_workspace_tokens > 0 ? in.decode_workspace_tokens : in.max_model_len);
  b.workspace = chunk * (layer_elements_per_token(m) * p.activation_bytes + static_cast<double>(m.vocab_size) * 4.0);
  if (in.kv_pool_bytes_override > 0) {
    b.kv_pool = in.kv_pool_bytes_override;
  } else {
    b.kv_pool = std::max(0.0, in.device_bytes * in.gpu_memory_utilization - b.weights - b.workspace);
  }
  const double per_sequence = b.kv_bytes_per_token * static_cast<double>(in.max_model_len);
  b.sequences_that_fit = per_sequence > 0 ? static_cast<int64_t>(std::floor(b.kv_pool / per_sequence)) : 0;
  b.sequences_waiting = std::max<int64_t>(0, in.max_num_seqs - b.sequences_that_fit);
  return b;
}

}  // namespace rlrun::orchestrator
