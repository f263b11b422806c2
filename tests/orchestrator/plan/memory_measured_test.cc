// The plan against measurement: the quickstart's model on the CPU backend, a real training
// forward/backward on a packed micro-batch of seq_len x micro_batch_rows tokens (checkpointing on
// and off) and a real KV pool allocation, each compared with the plan (Backend::peak_bytes()).
// Agreement within 20% is required; both figures are printed. On the CPU backend the plan follows
// the engine's allocations exactly (it misses only cu_seqlens), so 1% is required there too.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "common/check.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "orchestrator/plan/memory_advice.h"
#include "orchestrator/roles/model_from_config.h"

namespace rlrun::orchestrator {
namespace {

// The quickstart without its KL pull: KlReferenceWeightsMatchThePlan measures the reference alone.
Config quickstart() {
  // fp32: the models measured here keep f32 weights (auto would plan bf16 where the CPU has it).
  Result<Config> c =
      load_config(std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml", {"kl_coef=0", "compute_dtype=fp32"});
  RLRUN_CHECK(c.ok(), c.ok() ? "" : c.status().message());
  return *c;
}

// Sequences of 40 tokens packed into one micro-batch of exactly `n` tokens (the last one shorter).
struct Packed {
  std::vector<int32_t> tokens, positions, cu, targets;
  explicit Packed(int64_t n, int64_t vocab) {
    cu.push_back(0);
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0 && i % 40 == 0) cu.push_back(static_cast<int32_t>(i));
      tokens.push_back(static_cast<int32_t>((i * 7 + 3) % vocab));
      positions.push_back(static_cast<int32_t>(i - cu.back()));
      targets.push_back(static_cast<int32_t>((i * 7 + 10) % vocab));
    }
    cu.push_back(static_cast<int32_t>(n));
  }
  engine::PackedBatch batch() const { return {tokens, positions, cu, targets}; }
};

void expect_within_20_percent(const char* what, double plan, double measured) {
  std::printf("%-44s plan %12.0f  measured %12.0f  ratio %.4f\n", what, plan, measured, measured / plan);
  EXPECT_NEAR(measured / plan, 1.0, 0.2) << what;
  EXPECT_NEAR(measured / plan, 1.0, 0.01) << what << ": the plan no longer follows the engine's allocations";
}

TEST(MemoryMeasured, TrainerStepOfTheQuickstartModelMatchesThePlan) {
  for (bool ckpt : {false, true}) {
    Config c = quickstart();
    c.gradient_checkpointing = ckpt;
    DeviceMemory device{1e12, "test"};
    Result<RunPlan> plan = plan_run(c, &device);
    ASSERT_TRUE(plan.ok()) << plan.status().message();

    auto backend = engine::create_backend("cpu", 1);
    ASSERT_TRUE(backend.ok());
    auto model = engine::Model::create(**backend, *model_config_from(c.model), engine::ModelOptions{ckpt});
    ASSERT_TRUE(model.ok());
    (*model)->weights().init_random(1, 0.02f);
    // The AdamW moments m and v the trainer's optimizer keeps (f32, one per parameter each).
    const int64_t p = (*model)->weights().flat_size();
    engine::Tensor m = (*backend)->zeros({p}, engine::DType::kF32), v = (*backend)->zeros({p}, engine::DType::kF32);
    const double state = static_cast<double>((*backend)->bytes_in_use());

    const int64_t n = c.seq_len * c.micro_batch_rows;
    Packed packed(n, c.model.vocab_size);
    Result<double> nll = engine::mean_nll_backward(**model, packed.batch());
    ASSERT_TRUE(nll.ok()) << nll.status().message();
    const double peak = static_cast<double>((*backend)->peak_bytes());

    const TrainerBudget& t = plan->trainer;
    std::printf("gradient checkpointing %s, %lld tokens:\n", ckpt ? "on" : "off", static_cast<long long>(n));
    expect_within_20_percent("  model state (weights, grads, moments)", t.model_state(), state);
    expect_within_20_percent("  activations + logits workspace", t.activations + t.logits_workspace, peak - state);
    expect_within_20_percent("  forward/backward peak", t.forward_backward_peak(), peak);
  }
}

// kl_coef > 0: the trainer process's KL reference, a model with its gradients released.
TEST(MemoryMeasured, KlReferenceWeightsMatchThePlan) {
  Config c = quickstart();
  DeviceMemory device{1e12, "test"};
  Result<RunPlan> without = plan_run(c, &device);
  c.kl_coef = 0.1;
  Result<RunPlan> with = plan_run(c, &device);
  ASSERT_TRUE(without.ok() && with.ok());
  EXPECT_EQ(without->trainer.reference_weights, 0.0);
  auto backend = engine::create_backend("cpu", 1);
  ASSERT_TRUE(backend.ok());
  auto reference = engine::Model::create(**backend, *model_config_from(c.model));
  ASSERT_TRUE(reference.ok());
  (*reference)->weights().release_grads();
  (*reference)->weights().release_master();
  expect_within_20_percent("KL reference weights", with->trainer.reference_weights,
                           static_cast<double>((*backend)->bytes_in_use()));
  EXPECT_EQ(with->trainer.model_state() - without->trainer.model_state(), with->trainer.reference_weights);
}

TEST(MemoryMeasured, RolloutWeightsAndKvPoolMatchThePlan) {
  for (int64_t kv_mb : {int64_t{0}, int64_t{3}}) {
    Config c = quickstart();
    c.kv_cache_memory_mb = kv_mb;
    DeviceMemory device{1e12, "test"};
    Result<RunPlan> plan = plan_run(c, &device);
    ASSERT_TRUE(plan.ok());
    const RolloutBudget& r = plan->rollout;

    auto backend = engine::create_backend("cpu", 1);
    ASSERT_TRUE(backend.ok());
    auto model = engine::Model::create(**backend, *model_config_from(c.model));
    ASSERT_TRUE(model.ok());
    (*model)->weights().release_grads();  // a rollout worker needs no gradients
    const double weights = static_cast<double>((*backend)->bytes_in_use());
    // The pool a rollout worker allocates, from the function the worker calls.
    const int64_t per_seq_blocks = (c.max_model_len + c.kv_block_size - 1) / c.kv_block_size;
    const int64_t blocks = scheduler_options_from(c, **model).kv_num_blocks;
    if (kv_mb == 0) {
      EXPECT_EQ(blocks, c.max_num_seqs * per_seq_blocks) << "0: max_num_seqs whole sequences";
    }
    auto cache = engine::KvCache::create(**backend, engine::KvCacheConfig::for_model((*model)->config(),
                                                                                  c.kv_block_size, blocks));
    ASSERT_TRUE(cache.ok());
    const double pool = static_cast<double>((*backend)->bytes_in_use()) - weights;

    std::printf("kv_cache_memory_mb %lld: %lld sequences of %lld tokens fit\n", static_cast<long long>(kv_mb),
                static_cast<long long>(r.sequences_that_fit), static_cast<long long>(c.max_model_len));
    expect_within_20_percent("  rollout weights", r.weights, weights);
    expect_within_20_percent("  KV pool", r.kv_pool, pool);
    EXPECT_EQ(r.sequences_that_fit, blocks / per_seq_blocks);
    if (kv_mb != 0) continue;

    // The planned prefill: max_num_seqs prompts of max_prompt_tokens + 1 tokens in one step.
    ASSERT_EQ(plan->rollout_inputs.decode_workspace_tokens, c.max_num_seqs * (c.max_prompt_tokens + 1));
    std::vector<engine::SeqId> seqs;
    std::vector<int32_t> tokens, cu{0};
    for (int64_t s = 0; s < c.max_num_seqs; ++s) {
      seqs.push_back(s);
      ASSERT_TRUE((*cache)->add_sequence(s).ok());
      for (int64_t i = 0; i <= c.max_prompt_tokens; ++i) tokens.push_back(static_cast<int32_t>((s + i) % 100));
      cu.push_back(static_cast<int32_t>(tokens.size()));
    }
    const double before = static_cast<double>((*backend)->bytes_in_use());
    Result<engine::Tensor> logits = (*model)->forward_cached(**cache, seqs, tokens, cu);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    expect_within_20_percent("  prefill workspace", r.workspace,
                             static_cast<double>((*backend)->peak_bytes()) - before);
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
