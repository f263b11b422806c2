// The plan against measurement for the distributed optimizer: real trainer ranks (threads, Gloo
// over loopback, one CPU backend each) take a training step, and each rank's backend bytes (in use
// after the step, and the peak) are compared with the plan's figure for that rank; every figure is
// printed.
//   * The quickstart decoder on the CPU backend: f32 weights ARE the master, so the plan has no
//     master line; the moments and the gradient shard are split over the ranks.
//   * The bigram TEST DOUBLE with bf16 compute weights (what a bf16 device backend gives the
//     decoder; the CPU backend computes the decoder in f32 only): the optimizer keeps the f32
//     master of its shard, so the plan's master line is 4 / R bytes per parameter.
// The plan counts num_parameters(); the trainer's buffers include the alignment padding
// (< 0.5% here). 1% is required.
// Rerun the figures: ctest -R memory_measured_sharded -V (or run the test binary).
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "common/check.h"
#include "engine/model/model.h"
#include "orchestrator/plan/memory_advice.h"
#include "orchestrator/roles/model_from_config.h"
#include "tests/trainer/bigram_test_double.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/model_adapter.h"
#include "trainer/train_step.h"

namespace rlrun::orchestrator {
namespace {

using trainer::MicroBatch;

struct RankMemory {
  double state = 0;  // backend bytes in use after the step (model state: nothing else is alive)
  double peak = 0;   // backend peak over the step
};

void expect_within_1_percent(const std::string& what, double plan, double measured) {
  std::printf("  %-46s plan %12.0f  measured %12.0f  ratio %.4f\n", what.c_str(), plan, measured, measured / plan);
  EXPECT_NEAR(measured / plan, 1.0, 0.01) << what;
}

// Sequences of 40 tokens packed into micro-batches of exactly `n` tokens, prompt 8 tokens each.
std::vector<MicroBatch> micro_batches(int64_t count, int64_t n, int64_t vocab) {
  std::vector<MicroBatch> out;
  for (int64_t b = 0; b < count; ++b) {
    std::vector<int32_t> ids, pos, cu{0};
    std::vector<uint8_t> mask;
    std::vector<float> lp, adv;
    for (int64_t t = 0; t < n; ++t) {
      if (t > 0 && t % 40 == 0) cu.push_back(static_cast<int32_t>(t));
      if (t % 40 == 0) adv.push_back(t % 80 == 0 ? 1.0f : -1.0f);
      ids.push_back(static_cast<int32_t>((t * 7 + 3 * b + 3) % vocab));
      pos.push_back(static_cast<int32_t>(t - cu.back()));
      mask.push_back(t % 40 >= 8 ? 1 : 0);
      lp.push_back(t % 40 >= 8 ? -3.0f : 0.0f);
    }
    cu.push_back(static_cast<int32_t>(n));
    Result<MicroBatch> mb = trainer::make_micro_batch(ids, pos, cu, mask, adv, lp);
    RLRUN_CHECK(mb.ok(), mb.ok() ? "" : mb.status().message());
    out.push_back(std::move(mb).value());
  }
  return out;
}

trainer::TrainerOptions distributed_options() {
  trainer::TrainerOptions o;
  o.learning_rate = 1e-4;
  o.optimizer.use_distributed_optimizer = true;
  return o;
}

// Every rank builds its model with make_model(backend), trains two steps and reports its memory.
template <typename MakeModel>
std::vector<RankMemory> measure(int ranks, int64_t tokens, int64_t vocab, MakeModel make_model) {
  std::vector<RankMemory> out(ranks);
  static int group = 0;
  trainer::testing::run_group(ranks, [&](int rank, engine::Communicator& comm) {
    auto backend = engine::create_backend("cpu", 1);
    ASSERT_TRUE(backend.ok());
    auto model = make_model(**backend);
    auto trainer = trainer::Trainer::create(distributed_options(), model->trainable(), &comm);
    ASSERT_TRUE(trainer.ok()) << trainer.status().message();
    for (int step = 0; step < 2; ++step) {
      auto report = (*trainer)->train(micro_batches(1, tokens, vocab));
      ASSERT_TRUE(report.ok()) << report.status().message();
    }
    out[rank] = {static_cast<double>((*backend)->bytes_in_use()), static_cast<double>((*backend)->peak_bytes())};
  }, "sharded-mem" + std::to_string(group++));
  return out;
}

// Without the quickstart's KL reference, which memory_measured_test measures on its own.
Config quickstart_on(int ranks) {
  // fp32: the models measured here keep f32 weights (auto would plan bf16 where the CPU has it).
  Result<Config> c =
      load_config(std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml", {"kl_coef=0", "compute_dtype=fp32"});
  RLRUN_CHECK(c.ok(), c.ok() ? "" : c.status().message());
  c->trainer_num_workers = ranks;
  c->use_distributed_optimizer = true;
  return *c;
}

struct DecoderRank {
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<trainer::ModelAdapter> adapter;
  trainer::TrainableModel& trainable() { return *adapter; }
};

TEST(MemoryMeasuredSharded, F32DecoderOnTwoAndFourRanksMatchesThePlan) {
  for (int ranks : {2, 4}) {
    const Config c = quickstart_on(ranks);
    DeviceMemory device{1e12, "test"};
    Result<RunPlan> plan = plan_run(c, &device);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    const TrainerBudget& t = plan->trainer;
    EXPECT_EQ(t.master_weights, 0);  // f32 weights are the master
    const engine::ModelConfig mc = *model_config_from(c.model);
    const int64_t tokens = c.seq_len * c.micro_batch_rows;
    const auto measured = measure(ranks, tokens, mc.vocab_size, [&](engine::Backend& backend) {
      auto r = std::make_unique<DecoderRank>();
      auto m = engine::Model::create(backend, mc, engine::ModelOptions{c.gradient_checkpointing});
      RLRUN_CHECK(m.ok(), "model");
      r->model = std::move(m).value();
      r->model->weights().init_random(1, 0.02f);
      r->adapter = std::make_unique<trainer::ModelAdapter>(*r->model);
      return r;
    });
    std::printf("quickstart decoder (%lld parameters), f32 weights, %d ranks, %lld tokens per micro-batch:\n",
                static_cast<long long>(mc.num_parameters()), ranks, static_cast<long long>(tokens));
    for (int r = 0; r < ranks; ++r) {
      expect_within_1_percent(str("rank ", r, " model state (", t.model_state() / mc.num_parameters(), " B/param)"),
                              t.model_state(), measured[r].state);
      expect_within_1_percent(str("rank ", r, " peak (forward/backward)"), t.forward_backward_peak(), measured[r].peak);
    }
  }
}

struct BigramRank {
  std::unique_ptr<trainer::testing::BigramTestDouble> model;
  trainer::TrainableModel& trainable() { return *model; }
};

TEST(MemoryMeasuredSharded, Bf16WeightsKeepTheMasterOfTheirShardOnly) {
  constexpr int64_t kVocab = 1024;  // P = V^2 + V = 1,049,600 parameters
  const double params = static_cast<double>(kVocab * kVocab + kVocab);
  for (int ranks : {2, 4}) {
    TrainerPlanInputs in;
    in.precision = engine_bf16_policy();
    in.data_parallel_ranks = ranks;
    in.distributed_optimizer = true;
    const TrainerBudget t = plan_model_state(params, in);
    const auto measured = measure(ranks, 160, kVocab, [&](engine::Backend& backend) {
      auto r = std::make_unique<BigramRank>();
      r->model = std::make_unique<trainer::testing::BigramTestDouble>(backend, kVocab, 3, engine::DType::kBF16);
      return r;
    });
    std::printf("bigram test double (%.0f parameters), bf16 weights, %d ranks:\n", params, ranks);
    std::printf("  plan per parameter: weights %.2f + gradients %.2f + master %.3f + moments %.3f + gradient shard "
                "%.3f = %.3f B (the master kept whole would add %.3f)\n",
                t.weights / params, t.gradients / params, t.master_weights / params, t.optimizer_moments / params,
                t.gradient_shard / params, t.model_state() / params, 4.0 - t.master_weights / params);
    for (int r = 0; r < ranks; ++r) {
      expect_within_1_percent(str("rank ", r, " model state"), t.model_state(), measured[r].state);
      // The step's only other bytes are per-token vectors (logprob, entropy and their gradients).
      expect_within_1_percent(str("rank ", r, " peak"), t.model_state(), measured[r].peak);
    }
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
