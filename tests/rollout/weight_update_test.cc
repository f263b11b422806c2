// (e) A weight update in the middle of generation: trainer rank 0 (a thread with the trainer's
// WeightSender) broadcasts new weights over Gloo while the rollout side is between decode steps.
// No request is lost, every token records the version it was sampled under, and the model ends
// up with the sender's weights.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/bf16.h"
#include "engine/comm/communicator.h"
#include "rollout/weight_update.h"
#include "tests/rollout/rollout_test_util.h"
#include "trainer/weight_sender.h"

namespace rlrun::rollout {
namespace {

using testing::greedy_request;
using testing::prompt_of;

// Runs rank 0 and rank 1 of a two-member Gloo group on two threads.
void run_pair(const std::function<void(engine::Communicator&)>& sender,
              const std::function<void(engine::Communicator&)>& receiver) {
  auto store = engine::make_in_process_store();
  auto member = [&](int rank) {
    engine::GroupOptions o;
    o.name = "weights";
    o.rank = rank;
    o.size = 2;
    o.timeout = std::chrono::milliseconds(20000);
    auto comm = engine::make_gloo_communicator(store, o);
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    (rank == 0 ? sender : receiver)(**comm);
  };
  std::thread t0(member, 0), t1(member, 1);
  t0.join();
  t1.join();
}

TEST(WeightUpdate, MidGenerationLosesNothingAndRecordsVersionsPerToken) {
  const int64_t bucket_bytes = 4096;  // many buckets: the tiny model is ~70 KiB
  std::vector<float> sent_weights, received;
  int64_t staging_bytes = -1;
  std::map<std::pair<uint64_t, uint32_t>, SampleOutput> out;
  run_pair(
      [&](engine::Communicator& comm) {
        auto backend = testing::cpu_backend();
        auto trainer_model = testing::tiny_model(*backend, /*seed=*/2);
        trainer::WeightSender sender(*backend, engine::flat_layout_of(trainer_model->weights()), comm, bucket_bytes);
        auto report = sender.send(trainer_model->weights().master_flat(), 1);
        ASSERT_TRUE(report.ok()) << report.status().message();
        sent_weights = engine::to_host_f32(trainer_model->weights().master_flat());
      },
      [&](engine::Communicator& comm) {
        auto backend = testing::cpu_backend();
        auto model = testing::tiny_model(*backend, /*seed=*/1);
        auto s = testing::make_scheduler(*model, testing::small_options());
        WeightUpdater updater(*model, comm, bucket_bytes);
        for (uint64_t i = 0; i < 4; ++i) s->add(greedy_request(i, prompt_of(4 + i, i), 10 + 2 * i));
        for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->step().ok());
        auto report = updater.receive();  // the step boundary
        ASSERT_TRUE(report.ok()) << report.status().message();
        EXPECT_EQ(report->version, 1u);
        EXPECT_GT(report->buckets, 10);
        staging_bytes = report->staging_bytes;
        s->set_weight_version(report->version);
        s->add(greedy_request(9, prompt_of(3, 9), 4));  // arrives after the update
        out = testing::run_to_end(*s);
        received = engine::to_host_f32(model->weights().compute_flat());  // what generation reads
      });
  ASSERT_EQ(out.size(), 5u);
  for (uint64_t i = 0; i < 4; ++i) {
    const SampleOutput& o = out.at({i, 0});
    EXPECT_EQ(o.finish_reason, FinishReason::kLength);
    ASSERT_EQ(o.tokens.size(), 10 + 2 * i);
    ASSERT_EQ(o.weight_versions.size(), o.tokens.size());
    for (size_t t = 0; t < o.tokens.size(); ++t) EXPECT_EQ(o.weight_versions[t], t < 5 ? 0 : 1) << "token " << t;
  }
  EXPECT_EQ(out.at({9, 0}).weight_versions, std::vector<int64_t>(4, 1));
  EXPECT_LE(staging_bytes, bucket_bytes);  // memory: one bucket beyond the weights
  ASSERT_FALSE(sent_weights.empty());
  EXPECT_EQ(received, sent_weights);
  // A request that starts after the update generates exactly what the sender's model does.
  auto backend = testing::cpu_backend();
  auto trainer_model = testing::tiny_model(*backend, /*seed=*/2);
  auto fresh = testing::make_scheduler(*trainer_model, testing::small_options());
  fresh->add(greedy_request(9, prompt_of(3, 9), 4));
  EXPECT_EQ(testing::run_to_end(*fresh).at({9, 0}).tokens, out.at({9, 0}).tokens);
}

// Random adapters (rank 2 on every projection, B too) for the tiny model, from `seed`.
std::unique_ptr<engine::LoraWeights> random_lora(engine::Backend& backend, const engine::ModelConfig& model,
                                                 uint64_t seed) {
  engine::LoraConfig lc;
  lc.rank = 2;
  lc.alpha = 4;
  auto lora = engine::LoraWeights::create(backend, model, lc);
  EXPECT_TRUE(lora.ok());
  std::vector<float> flat(static_cast<size_t>((*lora)->flat_size()));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (float& x : flat) x = nd(rng);
  backend.copy_from_host((*lora)->master_flat(), flat.data(), flat.size() * sizeof(float));
  return std::move(lora).value();
}

// A LoRA run: the worker's model has adapters attached, and a sync carries them alone (a fraction
// of the weights), after which generation is the sender's adapted model's.
TEST(WeightUpdate, WithAdaptersOnlyTheAdaptersArriveAndGenerationFollowsThem) {
  int64_t sent_bytes = 0;
  std::vector<int32_t> tokens;
  run_pair(
      [&](engine::Communicator& comm) {
        auto backend = testing::cpu_backend();
        auto model = testing::tiny_model(*backend, /*seed=*/1);
        auto lora = random_lora(*backend, model->config(), 2);
        trainer::WeightSender sender(*backend, engine::flat_layout_of(*lora), comm, 4096);
        auto report = sender.send(lora->master_flat(), 1);
        ASSERT_TRUE(report.ok()) << report.status().message();
        sent_bytes = report->bytes;
      },
      [&](engine::Communicator& comm) {
        auto backend = testing::cpu_backend();
        auto model = testing::tiny_model(*backend, /*seed=*/1);  // the same frozen base
        auto lora = random_lora(*backend, model->config(), 7);
        ASSERT_TRUE(model->attach_lora(lora.get()).ok());
        WeightUpdater updater(*model, comm, 4096);
        auto report = updater.receive();
        ASSERT_TRUE(report.ok()) << report.status().message();
        auto s = testing::make_scheduler(*model, testing::small_options());
        s->add(greedy_request(9, prompt_of(5, 9), 6));
        tokens = testing::run_to_end(*s).at({9, 0}).tokens;
      });
  auto backend = testing::cpu_backend();
  auto model = testing::tiny_model(*backend, /*seed=*/1);
  auto lora = random_lora(*backend, model->config(), 2);
  EXPECT_EQ(sent_bytes, lora->flat_size() * 4);
  EXPECT_LT(sent_bytes, model->weights().flat_size() * 4 / 4) << "adapters, not weights";
  engine::merge_lora(*lora, model->weights());  // the sender's adapted model, merged
  auto s = testing::make_scheduler(*model, testing::small_options());
  s->add(greedy_request(9, prompt_of(5, 9), 6));
  EXPECT_EQ(testing::run_to_end(*s).at({9, 0}).tokens, tokens);
}

// base_weights_dtype: bf16: a worker's model keeps bf16 matrices only; a full sync rounds the
// fp32 it receives into them (the norms exact), and the worker holds a quarter of what an fp32
// model with its gradient buffer takes.
TEST(WeightUpdate, ABf16FrozenModelTakesAFullSyncRoundedIntoItsMatrices) {
  std::vector<float> sent;
  std::vector<std::vector<float>> received;
  int64_t frozen_bytes = 0, fp32_bytes = 0;
  run_pair(
      [&](engine::Communicator& comm) {
        auto backend = testing::cpu_backend();
        auto trainer_model = testing::tiny_model(*backend, /*seed=*/2);
        trainer::WeightSender sender(*backend, engine::flat_layout_of(trainer_model->weights()), comm, 4096);
        ASSERT_TRUE(sender.send(trainer_model->weights().master_flat(), 1).ok());
        sent = engine::to_host_f32(trainer_model->weights().master_flat());
        fp32_bytes = trainer_model->weights().bytes();
      },
      [&](engine::Communicator& comm) {
        auto backend = testing::cpu_backend();
        engine::ModelOptions o;
        o.weight_storage = engine::WeightStorage::kBf16Frozen;
        auto model = engine::Model::create(*backend, testing::tiny_model(*backend)->config(), o);
        ASSERT_TRUE(model.ok());
        WeightUpdater updater(**model, comm, 4096);
        auto report = updater.receive();
        ASSERT_TRUE(report.ok()) << report.status().message();
        for (size_t i = 0; i < (*model)->weights().params().size(); ++i)
          received.push_back(engine::to_host_f32((*model)->weights().compute(i)));
        frozen_bytes = (*model)->weights().bytes();
      });
  auto backend = testing::cpu_backend();
  const auto params = engine::parameter_layout(testing::tiny_model(*backend)->config());
  ASSERT_EQ(received.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const engine::ParamInfo& p = params[i];
    for (int64_t e = 0; e < p.numel; ++e) {
      const float v = sent[p.offset + e];
      ASSERT_EQ(received[i][e], p.is_norm ? v : engine::bf16_to_f32(engine::f32_to_bf16(v))) << p.name << "[" << e << "]";
    }
  }
  EXPECT_LT(double(frozen_bytes), 0.27 * double(fp32_bytes)) << "bf16 matrices against f32 master + gradients";
}

}  // namespace
}  // namespace rlrun::rollout
