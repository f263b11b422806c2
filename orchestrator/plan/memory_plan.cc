#include "orchestrator/plan/memory_plan.h"

#include <algorithm>
#include <cmath>

#include "engine/model/model.h"

namespace rlrun::orchestrator {

PrecisionPolicy fp32_policy() { return {"fp32", 4, 4, 0, 8, 4, 4}; }
PrecisionPolicy bf16_mixed_policy() { return {"bf16-mixed", 2, 2, 4, 8, 2, 2}; }
PrecisionPolicy engine_bf16_policy() { return {"bf16-mixed, fp32 gradients", 2, 4, 4, 8, 2, 2, 6}; }
PrecisionPolicy cpu_bf16_cache_policy() {
  PrecisionPolicy p{"fp32 master, bf16 matrices", 2, 4, 4, 8, 4, 4, 4};
  p.reference_weight_bytes = 6;
  p.master_shards = false;
  return p;
}

double TrainerBudget::peak() const { return std::max(forward_backward_peak(), weight_send_peak()); }

double TrainerBudget::total() const {
  return model_state() + activations + logits_workspace + weight_send_buffer;
}

namespace {

engine::DType activation_dtype(const PrecisionPolicy& p) {
  return p.activation_bytes >= 4 ? engine::DType::kF32 : engine::DType::kBF16;
}

// The activation part of one packed micro-batch of n tokens, following engine/model/train.cc:
//   kept     what forward keeps for backward (the engine's own count), logits excluded;
//   scratch  what backward allocates beyond that at its peak: dx (N, H), then either the head's
//            dhf (N, H) while the logits are still alive, or, once they are freed, the layer
//            gradient scratch (LayerGradScratch) plus, with checkpointing, one recomputed layer.
struct ActivationPlan {
  double kept = 0, scratch = 0;
};

ActivationPlan plan_activations(const TrainerPlanInputs& in, double logits_chunk_bytes, bool checkpointing) {
  const engine::ModelConfig& m = in.model;
  const engine::DType dt = activation_dtype(in.precision);
  const double bytes = static_cast<double>(engine::dtype_size(dt));
  const int64_t n = in.tokens_per_micro_batch;
  const int64_t chunk = in.logits_chunk_elements;
  const double full = static_cast<double>(engine::estimate_saved_activation_bytes(m, n, dt, false, chunk));
  const double ckpt = static_cast<double>(engine::estimate_saved_activation_bytes(m, n, dt, true, chunk));
  const double one_layer = (full - ckpt) / static_cast<double>(m.num_layers);
  const bool logits_kept = chunk / m.vocab_size >= n;
  const double kept_logits = logits_kept ? logits_chunk_bytes : 0.0;

  const double t = static_cast<double>(n), h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.num_heads * m.head_dim());
  const double kv = static_cast<double>(m.num_kv_heads * m.head_dim());
  const double grad_scratch = t * (static_cast<double>(m.intermediate_size) + 2 * h + 2 * q + 2 * kv) * bytes;
  const double dx = t * h * bytes, dhf = t * h * bytes;
  const double layer_phase = grad_scratch + (checkpointing ? one_layer : 0.0) - logits_chunk_bytes;
  ActivationPlan a;
  a.kept = (checkpointing ? ckpt : full) - kept_logits;
  a.scratch = dx + std::max(dhf, layer_phase);
  return a;
}

}  // namespace

TrainerBudget plan_model_state(double params, const TrainerPlanInputs& in) {
  // The optimizer shards only across several ranks (trainer/optimizer.h).
  const bool sharded = in.distributed_optimizer && in.data_parallel_ranks > 1;
  const double shard = sharded ? static_cast<double>(in.data_parallel_ranks) : 1.0;
  const PrecisionPolicy& p = in.precision;
  TrainerBudget b;
  b.weights = params * p.weight_bytes;
  b.gradients = params * p.grad_bytes;
  b.master_weights = params * p.master_bytes / (p.master_shards ? shard : 1.0);
  b.optimizer_moments = params * p.optimizer_bytes / shard;
  b.gradient_shard = sharded && in.gradient_shard_buffer ? params * p.grad_bytes / shard : 0.0;
  b.reference_weights = in.kl_reference ? params * p.reference_bytes() : 0.0;
  if (in.lora_parameters > 0) {  // the base frozen: weights only; the adapters are f32 and trained
    const double a = in.lora_parameters;
    b.weights = params * p.weight_bytes + a * 4;
    b.gradients = a * 4;
    b.master_weights = 0;  // the adapters' master is what forward reads
    b.optimizer_moments = a * p.optimizer_bytes / shard;
    b.gradient_shard = sharded && in.gradient_shard_buffer ? a * 4 / shard : 0.0;
    b.reference_weights = in.kl_reference ? a * 4 : 0.0;
  }
  return b;
}

TrainerBudget plan_trainer(const TrainerPlanInputs& in) {
  const PrecisionPolicy& p = in.precision;
  TrainerBudget b = plan_model_state(static_cast<double>(in.model.num_parameters()), in);

  // logits (chunk rows x V) in compute dtype; per token: ids, positions, targets (i32), logprob,
  // entropy (f32) and the caller's dlogprob (f32).
  const int64_t n = in.tokens_per_micro_batch, v = in.model.vocab_size;
  const int64_t chunk_rows = std::clamp<int64_t>(in.logits_chunk_elements / v, 1, n);
  const double logits_chunk_bytes =
      static_cast<double>(chunk_rows * v) * static_cast<double>(engine::dtype_size(activation_dtype(p)));
  b.logits_workspace = logits_chunk_bytes + static_cast<double>(n) * 6 * 4;

  const ActivationPlan full = plan_activations(in, logits_chunk_bytes, false);
  const ActivationPlan ckpt = plan_activations(in, logits_chunk_bytes, true);
  b.activations_no_checkpointing = full.kept + full.scratch;
  b.activations_checkpointing = ckpt.kept + ckpt.scratch;
  b.activations = in.gradient_checkpointing ? b.activations_checkpointing : b.activations_no_checkpointing;
  b.backward_scratch = in.gradient_checkpointing ? ckpt.scratch : full.scratch;
  b.weight_send_buffer = static_cast<double>(in.weight_send_bucket_bytes);
  return b;
}

RolloutBudget plan_rollout(const RolloutPlanInputs& in) {
  const engine::ModelConfig& m = in.model;
  const PrecisionPolicy& p = in.precision;
  const double tp = static_cast<double>(std::max(1, in.tensor_parallel_size));
  RolloutBudget b;
  const double weight_bytes = p.inference_weight_bytes > 0 ? p.inference_weight_bytes : p.weight_bytes;
  b.weights = static_cast<double>(m.num_parameters()) * weight_bytes / tp + in.lora_parameters * 4;
  b.reference_weights = in.kl_reference ? static_cast<double>(m.num_parameters()) * p.weight_bytes / tp : 0.0;
  b.weight_receive_buffer = in.weight_receive_buffer_bytes;
  b.kv_bytes_per_token = 2.0 * static_cast<double>(m.num_layers * m.num_kv_heads * m.head_dim()) * p.kv_bytes / tp;

  // One forward_cached() of `chunk` new tokens (engine/model/infer.cc): two residual buffers, one layer's
  // activations without the saved statistics, and the last token's hidden state, its norm and
  // logits per sequence, all in compute dtype; token ids and positions (i32).
  const int64_t chunk = in.decode_workspace_tokens > 0 ? in.decode_workspace_tokens : in.max_model_len;
  const engine::DType dt = activation_dtype(p);
  const double stats = static_cast<double>(chunk * (2 + m.num_heads)) * 4.0;
  const double one_layer = static_cast<double>(engine::estimate_saved_activation_bytes(m, chunk, dt, false) -
                                               engine::estimate_saved_activation_bytes(m, chunk, dt, true)) /
                               static_cast<double>(m.num_layers) -
                           stats;
  const double seqs = static_cast<double>(std::min(chunk, in.max_num_seqs));
  b.workspace = (one_layer + 2.0 * static_cast<double>(chunk * m.hidden_size) * p.activation_bytes +
                 seqs * static_cast<double>(2 * m.hidden_size + m.vocab_size) * p.activation_bytes) /
                    tp +
                static_cast<double>(chunk) * 2 * 4;

  const double block_tokens = static_cast<double>(std::max<int64_t>(1, in.kv_block_size));
  const double per_block = b.kv_bytes_per_token * block_tokens;
  const double blocks_per_sequence = std::ceil(static_cast<double>(in.max_model_len) / block_tokens);
  b.kv_bytes_per_sequence = in.kv_block_size > 0 ? blocks_per_sequence * per_block
                                                 : b.kv_bytes_per_token * static_cast<double>(in.max_model_len);
  double pool = 0;
  if (in.kv_pool_bytes_override > 0) {
    pool = in.kv_pool_bytes_override;
  } else if (in.device_bytes > 0) {
    pool = std::max(0.0, in.device_bytes * in.gpu_memory_utilization - in.runtime_reserve_bytes - b.weights -
                             b.reference_weights - b.weight_receive_buffer - b.workspace);
  } else {  // no budget given: exactly max_num_seqs sequences (rollout::kv_blocks_for_budget)
    pool = static_cast<double>(in.max_num_seqs) * b.kv_bytes_per_sequence;
  }
  b.kv_pool = in.kv_block_size > 0 && per_block > 0 ? std::floor(pool / per_block) * per_block : pool;
  b.sequences_that_fit =
      b.kv_bytes_per_sequence > 0 ? static_cast<int64_t>(std::floor(b.kv_pool / b.kv_bytes_per_sequence)) : 0;
  b.sequences_waiting = std::max<int64_t>(0, in.max_num_seqs - b.sequences_that_fit);
  return b;
}

}  // namespace rlrun::orchestrator
