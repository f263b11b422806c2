// The trainer over LoRA adapters (trainer/lora_adapter.h) with the real decoder: only the adapters
// train (the base weights stay bit for bit, no base gradient buffer exists, the optimizer's state
// is adapter-sized), two data-parallel ranks with the distributed optimizer equal one, a
// checkpoint resumes bit for bit, and the KL reference is the base model with no weight copy.
#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "trainer/lora_adapter.h"
#include "trainer/train_step.h"
#include "trainer_test_util.h"

namespace rlrun::trainer {
namespace {

using testing::cpu_backend;
using testing::pack;
using testing::range;
using testing::run_group;

engine::ModelConfig tiny_config() {  // hidden 32, 2 layers, GQA 4/2, qwen2 biases, tied embeddings
  engine::ModelConfig c;
  c.architecture = "qwen2";
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 48;
  c.vocab_size = 64;
  c.qkv_bias = true;
  c.tie_embeddings = true;
  return c;
}

// A model, its adapters (rank 4, alpha 8, every projection; B = 0) and the trainable view.
struct LoraSetup {
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::LoraWeights> lora;
  std::unique_ptr<LoraModelAdapter> adapter;

  explicit LoraSetup(engine::Backend& backend, uint64_t lora_seed = 5) {
    auto m = engine::Model::create(backend, tiny_config());
    EXPECT_TRUE(m.ok());
    model = std::move(m).value();
    model->weights().init_random(3, 0.2f);
    engine::LoraConfig lc;
    lc.rank = 4;
    lc.alpha = 8;
    auto l = engine::LoraWeights::create(backend, tiny_config(), lc);
    EXPECT_TRUE(l.ok());
    lora = std::move(l).value();
    lora->init(lora_seed);
    auto a = LoraModelAdapter::create(*model, *lora);
    EXPECT_TRUE(a.ok()) << a.status().message();
    adapter = std::move(a).value();
  }
};

TrainerOptions options() {
  TrainerOptions o;
  o.learning_rate = 1e-2;
  o.optimizer.adam_eps = 1.0;  // nearly linear in the gradient: weights compare gradients
  o.optimizer.weight_decay = 0.01;
  o.optimizer.grad_clip = 1.0;
  o.number_of_minibatches = 2;
  return o;
}

std::vector<MicroBatch> batch(int seed) {
  const auto seqs = testing::random_sequences(8, 64, seed);
  std::vector<MicroBatch> all;
  for (int i = 0; i < 4; ++i) all.push_back(pack(seqs, {2 * i, 2 * i + 1}));
  return all;
}

TEST(LoraTrainer, OnlyTheAdaptersTrainAndTwoRanksEqualOne) {
  const std::vector<MicroBatch> all = batch(11);
  TrainerOptions o = options();
  o.optimizer.use_distributed_optimizer = true;
  auto backend = cpu_backend();
  LoraSetup single(*backend);
  const std::vector<float> base_before = engine::to_host_f32(single.model->weights().master_flat());
  const std::vector<float> lora_before = engine::to_host_f32(single.lora->master_flat());
  auto trainer = Trainer::create(o, *single.adapter, nullptr);
  ASSERT_TRUE(trainer.ok());
  for (int s = 0; s < 2; ++s) ASSERT_TRUE((*trainer)->train(all).ok());
  EXPECT_FALSE(single.model->weights().has_grads()) << "the base has no gradient buffer";
  EXPECT_EQ(engine::to_host_f32(single.model->weights().master_flat()), base_before) << "the base is frozen";
  const std::vector<float> trained = engine::to_host_f32(single.lora->master_flat());
  EXPECT_NE(trained, lora_before);
  // AdamW moments over the adapters only: 2 x 4 bytes per adapter element.
  EXPECT_LE((*trainer)->optimizer().state_bytes(), static_cast<size_t>(single.lora->flat_size()) * 8 * 2);

  std::vector<std::vector<float>> finals(2);
  run_group(2, [&](int rank, engine::Communicator& comm) {
    auto b = cpu_backend();
    LoraSetup s(*b);
    auto t = Trainer::create(o, *s.adapter, &comm);
    ASSERT_TRUE(t.ok());
    for (int step = 0; step < 2; ++step)
      ASSERT_TRUE((*t)->train(std::vector<MicroBatch>{all[rank], all[2 + rank]}).ok());
    finals[rank] = engine::to_host_f32(s.lora->master_flat());
  }, "lora-ranks");
  EXPECT_EQ(finals[0], finals[1]);
  ASSERT_EQ(finals[0].size(), trained.size());
  for (size_t i = 0; i < trained.size(); ++i) ASSERT_NEAR(finals[0][i], trained[i], 2e-5f) << i;
}

TEST(LoraTrainer, ACheckpointHoldsTheAdaptersAndTheirMomentsAndResumesBitForBit) {
  namespace fs = std::filesystem;
  const std::string root = (fs::temp_directory_path() / ("rlrun_lora_ckpt_" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  auto run = [&](int first, int last, bool save, const std::string& load, uint64_t lora_seed) {
    auto b = cpu_backend();
    LoraSetup s(*b, lora_seed);
    auto t = Trainer::create(options(), *s.adapter, nullptr);
    EXPECT_TRUE(t.ok());
    if (!load.empty()) {
      EXPECT_TRUE((*t)->load_checkpoint(load).ok());
    }
    for (int step = first; step < last; ++step) {
      EXPECT_TRUE((*t)->train(batch(20 + step)).ok());
      if (save) {
        EXPECT_TRUE((*t)->save_checkpoint(root, step + 1, CheckpointExtras{"{}", ""}).ok());
      }
    }
    return engine::to_host_f32(s.lora->master_flat());
  };
  const std::vector<float> uninterrupted = run(0, 3, false, "", 5);
  run(0, 1, true, "", 5);
  const std::vector<float> resumed = run(1, 3, false, checkpoint_dir(root, 1), 77);  // other initial adapters
  EXPECT_EQ(resumed, uninterrupted);
  fs::remove_all(root);
}

TEST(LoraTrainer, TheKlReferenceIsTheBaseModelWithoutACopyOfItsWeights) {
  auto backend = cpu_backend();
  LoraSetup s(*backend);
  auto plain = engine::Model::create(*backend, tiny_config());
  ASSERT_TRUE(plain.ok());
  (*plain)->weights().init_random(3, 0.2f);
  auto reference = LoraReference::create(*s.model, *s.lora);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  EXPECT_EQ((*reference)->flat_size(), s.lora->flat_size()) << "adapter-sized, not a model copy";
  TrainerOptions o = options();
  o.loss.kl_coef = 0.1;
  auto trainer = Trainer::create(o, *s.adapter, nullptr);
  ASSERT_TRUE(trainer.ok());
  (*trainer)->set_reference(reference->get());
  for (int step = 0; step < 2; ++step) ASSERT_TRUE((*trainer)->train(batch(30 + step)).ok());

  const MicroBatch probe = pack(testing::random_sequences(4, 64, 40), range(0, 4));
  auto ref = (*reference)->forward(probe, false);
  auto base = forward_micro_batch(**plain, probe, false);
  auto policy = s.adapter->forward(probe, false);
  ASSERT_TRUE(ref.ok() && base.ok() && policy.ok());
  EXPECT_EQ(engine::to_host_f32(ref->logprobs), engine::to_host_f32(base->logprobs)) << "B = 0 at capture";
  EXPECT_NE(engine::to_host_f32(policy->logprobs), engine::to_host_f32(base->logprobs)) << "the policy moved";
}

}  // namespace
}  // namespace rlrun::trainer
