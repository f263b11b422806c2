// The budget arithmetic against published figures (the seeds' memory texts).
#include "orchestrator/memory_plan.h"

#include <gtest/gtest.h>

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
  TrainerBudget b = plan_trainer(in);
  const double p = static_cast<double>(in.model.num_parameters());
  EXPECT_DOUBLE_EQ(b.model_state() / p, 4 + 12.0 / 8);
  EXPECT_NEAR(b.model_state() / p * 7e9 / 1e9, 38.5, 1e-9);
  in.distributed_optimizer = false;
  EXPECT_DOUBLE_EQ(plan_trainer(in).model_state() / p, 16);
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

TEST(MemoryPlan, SequencesThatFitAndWaiting) {
  RolloutPlanInputs in;
  in.model = llama2_7b();
  in.precision = bf16_mixed_policy();
  in.max_model_len = 4096;
  in.max_num_seqs = 64;
  in.device_bytes = 80e9;
  in.gpu_memory_utilization = 0.9;
  RolloutBudget b = plan_rollout(in);
  // 72 GB usable - 13.5 GB weights - workspace leaves ~57 GB: 27 sequences of 2 GiB each
  EXPECT_GT(b.sequences_that_fit, 20);
  EXPECT_LT(b.sequences_that_fit, 30);
  EXPECT_EQ(b.sequences_waiting, 64 - b.sequences_that_fit);
  EXPECT_NEAR(b.total(), 72e9, 1e6);
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

}  // namespace
}  // namespace rlrun::orchestrator
