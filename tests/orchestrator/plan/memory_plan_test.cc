// The budget arithmetic against published figures (the seeds' memory texts).
#include "orchestrator/plan/memory_plan.h"

#include <gtest/gtest.h>

#include "engine/model/model.h"

namespace rlrun::orchestrator {
namespace {

// A Llama-2-7B shape: 32 layers, hidden 4096, 32 heads (MHA), intermediate 11008, vocab 32000.
engine::ModelConfig llama2_7b() {
  engine::ModelConfig m;
  m.hidden_size = 4096;
  m.num_layers = 32;
  m.num_heads = 32;
  m.num_kv_heads = 32;
  m.intermediate_size = 11008;
  m.vocab_size = 32000;
  return m;
}

TEST(MemoryPlan, Llama2ShapeHasAboutSevenBillionParameters) {
  EXPECT_NEAR(llama2_7b().num_parameters() / 1e9, 6.74, 0.01);
}

TEST(MemoryPlan, MixedPrecisionAdamWIsSixteenBytesPerParameter) {
  // "a 7B model with AdamW in bf16 mixed precision needs 112 GB"
  TrainerPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  TrainerBudget b = plan_trainer(in);
  const double p = static_cast<double>(in.model.num_parameters());
  EXPECT_DOUBLE_EQ(b.model_state(), 16 * p);
  EXPECT_NEAR(b.model_state() / p * 7e9 / 1e9, 112.0, 1e-9);
  EXPECT_DOUBLE_EQ(plan_trainer({in.model, fp32_policy()}).model_state(), 16 * p);
}

TEST(MemoryPlan, DistributedOptimizerDividesMasterAndMoments) {
  // "on 8 data-parallel ranks with a sharded optimizer: 38.5 GB per rank (4 + 12/8 bytes)"
  TrainerPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  in.data_parallel_ranks = 8;
  in.distributed_optimizer = true;
  in.gradient_shard_buffer = false;  // the published arithmetic reduce-scatters in place
  TrainerBudget b = plan_trainer(in);
  const double p = static_cast<double>(in.model.num_parameters());
  EXPECT_DOUBLE_EQ(b.model_state() / p, 4 + 12.0 / 8);
  EXPECT_NEAR(b.model_state() / p * 7e9 / 1e9, 38.5, 1e-9);
  in.distributed_optimizer = false;
  EXPECT_DOUBLE_EQ(plan_trainer(in).model_state() / p, 16);
}

// LoRA: the frozen base is weights only; gradients, moments and the KL reference are the f32
// adapters' (rank 8 on every projection of the 7B shape: ~20M elements, 0.3% of the weights).
TEST(MemoryPlan, LoraKeepsGradientsAndMomentsForTheAdaptersOnly) {
  TrainerPlanInputs in;
  in.model = llama2_7b();
  in.precision = fp32_policy();
  in.kl_reference = true;
  const double p = static_cast<double>(in.model.num_parameters());
  in.lora_parameters = 32 * 8 * (4 * (4096 + 4096) + 3 * (4096 + 11008));
  const double a = in.lora_parameters;
  const TrainerBudget b = plan_trainer(in);
  EXPECT_DOUBLE_EQ(b.weights, 4 * p + 4 * a);
  EXPECT_DOUBLE_EQ(b.gradients, 4 * a);
  EXPECT_DOUBLE_EQ(b.optimizer_moments, 8 * a);
  EXPECT_DOUBLE_EQ(b.reference_weights, 4 * a) << "the adapters as captured, not a model copy";
  EXPECT_DOUBLE_EQ(b.model_state(), 4 * p + 20 * a);
  EXPECT_LT(b.model_state(), 4.1 * p) << "against 20 B/param for full fine-tuning with a reference";
  RolloutPlanInputs r;
  r.model = in.model;
  r.precision = in.precision;
  r.lora_parameters = a;
  EXPECT_DOUBLE_EQ(plan_rollout(r).weights, 4 * p + 4 * a);
}

TEST(MemoryPlan, KvCacheOfLlama2ShapeFor32SequencesOf4096Tokens) {
  // 2 x 32 layers x 32 kv heads x 128 x 2 bytes = 512 KiB per token; x 32 x 4096 = 68.7 GB
  RolloutPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  in.max_model_len = 4096;
  in.max_num_seqs = 32;
  in.kv_pool_bytes_override = 1;  // irrelevant here
  RolloutBudget b = plan_rollout(in);
  EXPECT_DOUBLE_EQ(b.kv_bytes_per_token, 524288.0);
  EXPECT_NEAR(b.kv_bytes_per_token * 32 * 4096 / 1e9, 68.7, 0.05);
}

// A Llama-2-7B rollout server on an 80 GB GPU, 64 sequences of 4096 tokens asked for.
RolloutPlanInputs llama2_server() {
  RolloutPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  in.max_model_len = 4096;
  in.max_num_seqs = 64;
  in.device_bytes = 80e9;
  in.gpu_memory_utilization = 0.9;
  return in;
}

TEST(MemoryPlan, SequencesThatFitAndWaiting) {
  RolloutPlanInputs in = llama2_server();
  RolloutBudget b = plan_rollout(in);
  // 72 GB usable - 13.5 GB weights - workspace leaves ~57 GB: 27 sequences of 2 GiB each
  EXPECT_GT(b.sequences_that_fit, 20);
  EXPECT_LT(b.sequences_that_fit, 30);
  EXPECT_EQ(b.sequences_waiting, 64 - b.sequences_that_fit);
  EXPECT_NEAR(b.total(), 72e9, 1e6);
}

// kl_reference_on: rollout: the worker's copy of the reference (compute weights, 2 B/param in
// bf16) comes out of the same device share, so the KV pool shrinks by exactly that much.
TEST(MemoryPlan, AKlReferenceOnTheRolloutWorkerTakesItsShareFromTheKvPool) {
  RolloutPlanInputs in = llama2_server();
  const RolloutBudget without = plan_rollout(in);
  in.kl_reference = true;
  const RolloutBudget with = plan_rollout(in);
  EXPECT_DOUBLE_EQ(with.reference_weights, 2.0 * static_cast<double>(llama2_7b().num_parameters()));
  EXPECT_EQ(without.reference_weights, 0.0);
  EXPECT_NEAR(without.kv_pool - with.kv_pool, with.reference_weights, with.kv_bytes_per_sequence / 64 * 16 + 1);
  EXPECT_LT(with.sequences_that_fit, without.sequences_that_fit);
  EXPECT_NEAR(with.total(), without.total(), without.kv_bytes_per_sequence);
}

TEST(MemoryPlan, CheckpointingKeepsOnlyLayerInputs) {
  TrainerPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  in.tokens_per_micro_batch = 4096;
  TrainerBudget b = plan_trainer(in);
  EXPECT_LT(b.activations_checkpointing, b.activations_no_checkpointing / 5);
  EXPECT_DOUBLE_EQ(b.activations, b.activations_no_checkpointing);
  in.gradient_checkpointing = true;
  EXPECT_DOUBLE_EQ(plan_trainer(in).activations, b.activations_checkpointing);
}

TEST(MemoryPlan, EnginePolicyKeepsFp32GradientsAndShardsMasterWithMoments) {
  TrainerPlanInputs in;
  in.model = llama2_7b();
  in.precision = engine_bf16_policy();
  const double p = static_cast<double>(in.model.num_parameters());
  EXPECT_DOUBLE_EQ(plan_trainer(in).model_state() / p, 18);  // bf16 gradients would make it the seed's 16
  in.data_parallel_ranks = 8;
  in.distributed_optimizer = true;
  // 2 weights + 4 gradients + 12 / 8 (fp32 master and moments) + 4 / 8 (the reduce-scatter output)
  const TrainerBudget b = plan_trainer(in);
  EXPECT_DOUBLE_EQ(b.master_weights / p, 4.0 / 8);
  EXPECT_DOUBLE_EQ(b.optimizer_moments / p, 8.0 / 8);
  EXPECT_DOUBLE_EQ(b.gradient_shard / p, 4.0 / 8);
  EXPECT_DOUBLE_EQ(b.model_state() / p, 2 + 4 + 12.0 / 8 + 4.0 / 8);
  in.gradient_shard_buffer = false;  // Megatron / ZeRO-1 counting: 7.5 B/param
  EXPECT_DOUBLE_EQ(plan_trainer(in).model_state() / p, 7.5);
  in.data_parallel_ranks = 1;  // one rank shards nothing
  EXPECT_DOUBLE_EQ(plan_trainer(in).model_state() / p, 18);
}

TEST(MemoryPlan, Fp32PolicyHasNoMasterToShard) {
  TrainerPlanInputs in;
  in.model = llama2_7b();
  in.precision = fp32_policy();
  in.data_parallel_ranks = 4;
  in.distributed_optimizer = true;
  const TrainerBudget b = plan_trainer(in);
  const double p = static_cast<double>(in.model.num_parameters());
  EXPECT_DOUBLE_EQ(b.master_weights, 0);  // the f32 weights are the master
  EXPECT_DOUBLE_EQ(b.model_state() / p, 4 + 4 + 8.0 / 4 + 4.0 / 4);
}

// The kept part of the activations is the engine's own count (logits moved to the workspace line).
TEST(MemoryPlan, ActivationsAreTheEnginesCountPlusBackwardScratch) {
  TrainerPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  in.tokens_per_micro_batch = 4096;
  for (bool ckpt : {false, true}) {
    in.gradient_checkpointing = ckpt;
    const TrainerBudget b = plan_trainer(in);
    // 4096 x 32000 logits > 2^24 elements: chunked, so not kept; the engine count has no logits
    const int64_t kept = engine::estimate_saved_activation_bytes(in.model, 4096, engine::DType::kBF16, ckpt);
    EXPECT_DOUBLE_EQ(b.activations - b.backward_scratch, static_cast<double>(kept));
    EXPECT_GT(b.backward_scratch, 0);
    // logits chunk: floor(2^24 / 32000) = 524 rows of bf16, + 24 bytes per token
    EXPECT_DOUBLE_EQ(b.logits_workspace, 524.0 * 32000 * 2 + 4096 * 24);
  }
  // A small vocabulary keeps the logits for backward: the engine counts them, the plan moves them.
  in.model.vocab_size = 512;
  in.gradient_checkpointing = false;
  const TrainerBudget b = plan_trainer(in);
  const int64_t kept = engine::estimate_saved_activation_bytes(in.model, 4096, engine::DType::kBF16, false);
  EXPECT_DOUBLE_EQ(b.activations - b.backward_scratch, static_cast<double>(kept) - 4096.0 * 512 * 2);
  EXPECT_DOUBLE_EQ(b.logits_workspace, 4096.0 * 512 * 2 + 4096 * 24);
}

TEST(MemoryPlan, KvPoolIsWholeBlocks) {
  RolloutPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  in.max_model_len = 100;  // 7 blocks of 16 tokens
  in.max_num_seqs = 10;
  in.kv_block_size = 16;
  in.kv_pool_bytes_override = 524288.0 * 16 * 15 + 1000;  // 15 whole blocks and a bit
  RolloutBudget b = plan_rollout(in);
  EXPECT_DOUBLE_EQ(b.kv_bytes_per_sequence, 524288.0 * 16 * 7);
  EXPECT_DOUBLE_EQ(b.kv_pool, 524288.0 * 16 * 15);
  EXPECT_EQ(b.sequences_that_fit, 2);
  EXPECT_EQ(b.sequences_waiting, 8);
  // No budget at all (cpu, kv_cache_memory_mb 0): exactly max_num_seqs sequences.
  in.kv_pool_bytes_override = 0;
  b = plan_rollout(in);
  EXPECT_EQ(b.sequences_that_fit, 10);
  EXPECT_EQ(b.sequences_waiting, 0);
  // Tensor parallelism splits the weights and the KV heads over the server's GPUs.
  in.tensor_parallel_size = 2;
  EXPECT_DOUBLE_EQ(plan_rollout(in).kv_bytes_per_token, 524288.0 / 2);
}

}  // namespace
}  // namespace rlrun::orchestrator
