// The run-level plan: fitting, the levers (order and savings), check_plan_fits, JSON, summary.json.
#include "orchestrator/plan/memory_advice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "orchestrator/plan/memory_report.h"

namespace rlrun::orchestrator {
namespace {

using ::testing::HasSubstr;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A Llama-2-7B trainer + rollout on 80 GiB GPUs, 4096-token micro-batches, 64 x 4096 sequences.
Config llama2_7b_on_cuda() {
  Config c;
  c.backend = BackendKind::kCuda;
  c.device_memory_gb = 80;
  c.model.hidden_size = 4096;
  c.model.num_layers = 32;
  c.model.num_heads = 32;
  c.model.num_kv_heads = 32;
  c.model.intermediate_size = 11008;
  c.model.vocab_size = 32000;
  c.model.max_position = 4096;
  c.seq_len = 4096;
  c.max_model_len = 4096;
  c.max_num_seqs = 64;
  c.max_prompt_tokens = 512;
  c.max_tokens = 1024;
  return c;
}

TEST(MemoryAdvice, SevenBillionOnOneEightyGigabyteGpuDoesNotFit) {
  const Config c = llama2_7b_on_cuda();
  Result<RunPlan> plan = plan_run(c);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->device.bytes, 80 * kGiB);
  // 18 bytes per parameter of state alone exceed 80 GiB
  EXPECT_DOUBLE_EQ(plan->trainer.model_state(), 18.0 * static_cast<double>(plan->model.num_parameters()));
  EXPECT_FALSE(plan->trainer_fits());
  EXPECT_TRUE(plan->rollout_fits());
  EXPECT_GT(plan->rollout.sequences_waiting, 0);
  EXPECT_FALSE(plan->fits());
  EXPECT_THAT(plan_problems(*plan).at(0), HasSubstr("a trainer rank needs"));
}

// base_weights_dtype: bf16 on the CPU: 2 bytes per parameter for the LoRA base in the trainer and
// for every rollout worker's weights (the adapters stay f32); without LoRA the trainer trains in f32.
TEST(MemoryAdvice, Bf16BaseWeightsHalveTheFrozenWeights) {
  Config c = llama2_7b_on_cuda();
  c.backend = BackendKind::kCpu;
  c.compute_dtype = ComputeDtypeChoice::kFp32;  // auto would be bf16 on a host that multiplies bf16 natively
  c.lora_rank = 8;
  const double p = 6.7e9;
  Result<RunPlan> fp32 = plan_run(c);
  c.base_weights_dtype = ComputeDtype::kBf16;
  Result<RunPlan> bf16 = plan_run(c);
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  const double n = static_cast<double>(fp32->model.num_parameters());
  EXPECT_GT(n, p);
  EXPECT_DOUBLE_EQ(fp32->trainer.weights - bf16->trainer.weights, 2 * n);
  EXPECT_DOUBLE_EQ(fp32->rollout.weights - bf16->rollout.weights, 2 * n);
  EXPECT_EQ(fp32->precision.name, "fp32");
  EXPECT_EQ(bf16->precision.name, "fp32 adapters, bf16 base") << "the plan's header names both";
  c.lora_rank = 0;
  Result<RunPlan> full = plan_run(c);
  c.base_weights_dtype = ComputeDtype::kFp32;
  Result<RunPlan> full32 = plan_run(c);
  ASSERT_TRUE(full.ok() && full32.ok());
  EXPECT_DOUBLE_EQ(full->trainer.weights, full32->trainer.weights) << "a trained policy stays fp32";
  EXPECT_DOUBLE_EQ(full32->rollout.weights - full->rollout.weights, 2 * n);
}

int index_of(const std::vector<MemoryLever>& levers, const std::string& prefix) {
  for (size_t i = 0; i < levers.size(); ++i)
    if (levers[i].change.rfind(prefix, 0) == 0) return static_cast<int>(i);
  return -1;
}

TEST(MemoryAdvice, LeversComeInOrderOfCostWithTheirSavings) {
  Config c = llama2_7b_on_cuda();
  c.micro_batch_rows = 2;
  Result<RunPlan> plan = plan_run(c);
  ASSERT_TRUE(plan.ok());
  const std::vector<MemoryLever> levers = memory_levers(c, *plan);
  const int ckpt = index_of(levers, "gradient_checkpointing=true");
  const int rows = index_of(levers, "micro_batch_rows=1");
  const int seq = index_of(levers, "seq_len=2048");
  const int seqs = index_of(levers, "max_num_seqs=");
  const int len = index_of(levers, "max_model_len=2048");
  const int ranks = index_of(levers, "trainer_num_workers=2");
  const int tp = index_of(levers, "inference_tensor_parallel_size=2");
  for (int i : {ckpt, rows, seq, seqs, len, ranks, tp}) ASSERT_GE(i, 0) << render_plan_text(*plan, levers, {}, "7b");
  EXPECT_EQ(ckpt, 0);
  EXPECT_LT(ckpt, rows);
  EXPECT_LT(rows, seq);
  EXPECT_LT(seq, seqs);
  EXPECT_LT(seqs, len);
  EXPECT_LT(len, ranks);
  EXPECT_LT(ranks, tp);
  // One rank: the distributed optimizer alone saves nothing, so it is not offered.
  EXPECT_EQ(index_of(levers, "use_distributed_optimizer"), -1);

  // Savings are exact re-plans of this config.
  const TrainerBudget& t = plan->trainer;
  EXPECT_DOUBLE_EQ(levers[ckpt].saves_bytes, t.activations_no_checkpointing - t.activations_checkpointing);
  EXPECT_EQ(levers[ckpt].process, "trainer");
  // Two ranks with the distributed optimizer: each keeps half the fp32 master and moments
  // ((4 + 8) B/param / 2 saved) and a gradient shard (4 B/param / 2 added).
  EXPECT_NEAR(levers[ranks].saves_bytes, 4.0 * static_cast<double>(plan->model.num_parameters()), 1.0);
  Config fewer = c;
  fewer.max_num_seqs = plan->rollout.sequences_that_fit;
  EXPECT_EQ(levers[seqs].change, "max_num_seqs=" + std::to_string(plan->rollout.sequences_that_fit));
  EXPECT_DOUBLE_EQ(levers[seqs].saves_bytes,
                   plan->rollout_demand() - plan_run(fewer, &plan->device)->rollout_demand());
  for (const MemoryLever& l : levers) EXPECT_GT(l.saves_bytes, 0) << l.change;
}

TEST(MemoryAdvice, DistributedOptimizerIsOfferedWithSeveralRanks) {
  Config c = llama2_7b_on_cuda();
  c.trainer_num_workers = 8;
  c.gradient_checkpointing = true;
  Result<RunPlan> plan = plan_run(c);
  ASSERT_TRUE(plan.ok());
  ASSERT_FALSE(plan->trainer_fits());
  const std::vector<MemoryLever> levers = memory_levers(c, *plan);
  const int dist = index_of(levers, "use_distributed_optimizer=true");
  ASSERT_EQ(dist, 0);  // checkpointing is already on: the next lever is first
  // 7/8 of the fp32 master and moments, less the gradient shard it adds.
  EXPECT_NEAR(levers[dist].saves_bytes, (12.0 * 7 / 8 - 4.0 / 8) * static_cast<double>(plan->model.num_parameters()),
              1.0);
  EXPECT_THAT(levers[dist].cost, HasSubstr("reduce-scatter"));
}

TEST(MemoryAdvice, CheckPlanFitsExplainsAndSucceedsWhenItFits) {
  const Status bad = check_plan_fits(llama2_7b_on_cuda());
  EXPECT_EQ(bad.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(bad.message(), HasSubstr("a trainer rank needs"));
  EXPECT_THAT(bad.message(), HasSubstr("gradient_checkpointing=true"));

  Result<Config> quick = load_config(std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml", {});
  ASSERT_TRUE(quick.ok()) << quick.status().message();
  EXPECT_TRUE(check_plan_fits(*quick).ok()) << check_plan_fits(*quick).message();
  // The same small model planned for an 80 GiB GPU fits too, and its pool holds every sequence.
  Config gpu = *quick;
  gpu.backend = BackendKind::kCuda;
  Result<RunPlan> plan = plan_run(gpu);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->fits());
  EXPECT_EQ(plan->rollout.sequences_waiting, 0);
  EXPECT_TRUE(memory_levers(gpu, *plan).empty());
}

TEST(MemoryAdvice, SharedCpuHostCountsEveryProcess) {
  Result<Config> quick = load_config(std::string(RLRUN_SOURCE_DIR) + "/configs/quickstart.yaml", {});
  ASSERT_TRUE(quick.ok());
  DeviceMemory big{1e12, "test"};
  Result<RunPlan> roomy = plan_run(*quick, &big);
  ASSERT_TRUE(roomy.ok());
  EXPECT_TRUE(roomy->fits());
  // Room for the larger process alone, not for both.
  DeviceMemory small{1.05 * std::max(roomy->trainer_need(), roomy->rollout_need()), "test"};
  Result<RunPlan> plan = plan_run(*quick, &small);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(plan->shared_host);
  EXPECT_DOUBLE_EQ(plan->host_total(), plan->trainer_need() + plan->rollout_need());
  EXPECT_TRUE(plan->trainer_fits());
  EXPECT_FALSE(plan->host_fits());  // each fits alone, not both together
  const std::vector<MemoryLever> levers = memory_levers(*quick, *plan);
  ASSERT_FALSE(levers.empty());
  EXPECT_EQ(levers[0].change, "gradient_checkpointing=true");
  EXPECT_EQ(index_of(levers, "trainer_num_workers"), -1);  // more processes on the host cost more
}

TEST(MemoryAdvice, JsonHasTheDocumentedKeys) {
  const Config c = llama2_7b_on_cuda();
  Result<RunPlan> plan = plan_run(c);
  ASSERT_TRUE(plan.ok());
  const nlohmann::json j = nlohmann::json::parse(
      plan_to_json(*plan, memory_levers(c, *plan), levers_until_fit(c, *plan), "7b.yaml").dump());
  for (const char* k : {"config", "backend", "precision", "fits", "device", "model", "trainer", "rollout",
                        "host_total_bytes", "problems", "levers", "fit_path"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"weights", "gradients", "master_weights", "optimizer_moments", "activations",
                        "activations_checkpointing", "activations_no_checkpointing", "backward_scratch",
                        "logits_workspace", "weight_send_buffer", "runtime_reserve", "phase_peak_bytes", "peak_bytes",
                        "need_bytes", "fits", "ranks", "tokens_per_micro_batch"})
    EXPECT_TRUE(j["trainer"].contains(k)) << k;
  for (const char* k : {"weights", "weight_receive_buffer", "workspace", "kv_bytes_per_token", "kv_bytes_per_sequence",
                        "kv_pool", "sequences_that_fit", "sequences_waiting", "max_num_seqs", "need_bytes", "fits"})
    EXPECT_TRUE(j["rollout"].contains(k)) << k;
  EXPECT_EQ(j["rollout"]["kv_bytes_per_token"], 524288);
  EXPECT_EQ(j["trainer"]["fits"], false);
  ASSERT_FALSE(j["levers"].empty());
  EXPECT_EQ(j["levers"][0]["set"], "gradient_checkpointing=true");
  EXPECT_TRUE(j["levers"][0]["saves_bytes"].is_number_integer());
  EXPECT_EQ(j["fit_path"]["fits"], true);
  EXPECT_EQ(j["fit_path"]["set"][0], "gradient_checkpointing=true");
}

// 7B on 80 GiB GPUs: checkpointing and shorter rows are not enough; the distributed optimizer
// over more ranks is (10 + 8/R bytes per parameter: R = 4 gives 12 B/param, 75 GiB).
TEST(MemoryAdvice, LeversUntilFitFindTheCheapestCombination) {
  const Config c = llama2_7b_on_cuda();
  Result<RunPlan> plan = plan_run(c);
  ASSERT_TRUE(plan.ok());
  const LeverPath path = levers_until_fit(c, *plan);
  ASSERT_TRUE(path.fits);
  ASSERT_EQ(path.steps.size(), 3u);
  EXPECT_EQ(path.steps.front().change, "gradient_checkpointing=true");
  // shorter rows would save under a tenth of the shortfall: passed over for more ranks
  EXPECT_EQ(path.steps[1].change, "trainer_num_workers=2 use_distributed_optimizer=true");
  EXPECT_EQ(path.settings, (std::vector<std::string>{"gradient_checkpointing=true", "trainer_num_workers=4",
                                                     "use_distributed_optimizer=true"}));
  EXPECT_EQ(path.steps.back().change, "trainer_num_workers=4 use_distributed_optimizer=true");
  for (const MemoryLever& l : path.steps) EXPECT_EQ(l.process, "trainer") << l.change;  // rollout fits already
  Result<RunPlan> after = plan_run(path.steps.back().config);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->fits());
  EXPECT_EQ(after->trainer_ranks, 4);
  EXPECT_EQ(as_set_args("a=1 b=2"), "--set a=1 --set b=2");
  const Status s = check_plan_fits(c);
  EXPECT_THAT(s.message(), HasSubstr("cheapest way to fit: --set gradient_checkpointing=true --set "
                                      "trainer_num_workers=4 --set use_distributed_optimizer=true"));
}

TEST(MemoryAdvice, RunSummaryParsesAndRejectsBadInput) {
  auto ok = parse_run_summary(
      R"({"processes": [{"role": "trainer", "rank": 0, "backend_peak_bytes": 1000, "peak_memory_bytes": 3000,
           "phase_peak_bytes": {"forward_backward": 900}}, {"role": "rollout", "peak_memory_bytes": 5, "x": 1}]})",
      "s.json");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].backend_peak_bytes, 1000);
  EXPECT_EQ((*ok)[0].peak_memory_bytes, 3000);
  EXPECT_EQ((*ok)[0].phase_peak_bytes.at("forward_backward"), 900);
  EXPECT_EQ((*ok)[1].backend_peak_bytes, -1);
  EXPECT_EQ((*ok)[1].peak_memory_bytes, 5);
  for (const char* bad : {"", "[]", R"({"processes": [{"role": "trainer"}]})",
                          R"({"processes": [{"role": "gpu", "peak_memory_bytes": 1}]})",
                          R"({"processes": [{"role": "trainer", "peak_memory_bytes": -4}]})",
                          R"({"processes": [{"role": "trainer", "backend_peak_bytes": "9"}]})",
                          R"({"processes": [{"role": "trainer", "peak_memory_bytes": 1, "phase_peak_bytes": 3}]})"}) {
    auto r = parse_run_summary(bad, "s.json");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), HasSubstr("s.json")) << bad;
    }
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
