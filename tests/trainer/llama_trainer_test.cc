// The trainer with the REAL decoder (engine/model/model.h, tiny config): one rank with the whole batch
// equals two ranks with half each; more micro-batches give the same update; weights sent by the
// trainer make a receiving model score tokens exactly like the trainer's.
#include <gtest/gtest.h>

#include "engine/comm/weight_receiver.h"
#include "engine/model/model.h"
#include "trainer/model_adapter.h"
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

std::unique_ptr<engine::Model> tiny_model(engine::Backend& backend, uint64_t seed = 3) {
  auto m = engine::Model::create(backend, tiny_config());
  EXPECT_TRUE(m.ok()) << m.status().message();
  (*m)->weights().init_random(seed, 0.2f);
  return std::move(m).value();
}

// Adam with a tiny eps maps near-zero gradient components to about +-lr whatever their size, so
// fp32 summation-order noise in such a component can move a weight by up to lr. With eps = 1 the
// step is nearly linear in the gradient, so comparing weights compares the gradients.
TrainerOptions options() {
  TrainerOptions o;
  o.learning_rate = 1e-2;
  o.optimizer.adam_eps = 1.0;
  o.optimizer.weight_decay = 0.01;
  o.optimizer.grad_clip = 1.0;
  o.number_of_minibatches = 2;
  o.loss.entropy_coef = 0.001;
  return o;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 10; ++i) {
    if (std::abs(a[i] - b[i]) > tol) ++bad;
    EXPECT_NEAR(a[i], b[i], tol) << "element " << i;
  }
}

std::vector<float> train_single(const TrainerOptions& o, const std::vector<MicroBatch>& mbs, int steps) {
  auto backend = cpu_backend();
  auto model = tiny_model(*backend);
  ModelAdapter adapter(*model);
  auto trainer = Trainer::create(o, adapter, nullptr);
  EXPECT_TRUE(trainer.ok());
  for (int s = 0; s < steps; ++s) {
    auto r = (*trainer)->train(mbs);
    EXPECT_TRUE(r.ok()) << r.status().message();
  }
  return engine::to_host_f32(adapter.params_flat());
}

TEST(LlamaTrainer, TwoRanksWithHalfTheBatchEachEqualOneRank) {
  const auto seqs = testing::random_sequences(8, 64, 11);
  std::vector<MicroBatch> all;
  for (int i = 0; i < 4; ++i) all.push_back(pack(seqs, {2 * i, 2 * i + 1}));
  TrainerOptions o = options();
  o.optimizer.use_distributed_optimizer = true;
  const auto single = train_single(o, all, 2);
  std::vector<std::vector<float>> finals(2);
  run_group(2, [&](int rank, engine::Communicator& comm) {
    auto backend = cpu_backend();
    auto model = tiny_model(*backend);
    ModelAdapter adapter(*model);
    auto trainer = Trainer::create(o, adapter, &comm);
    ASSERT_TRUE(trainer.ok());
    for (int s = 0; s < 2; ++s) ASSERT_TRUE((*trainer)->train(std::vector<MicroBatch>{all[rank], all[2 + rank]}).ok());
    finals[rank] = engine::to_host_f32(adapter.params_flat());
  }, "llama-ranks");
  EXPECT_EQ(finals[0], finals[1]);
  expect_close(finals[0], single, 2e-5f);
  auto backend = cpu_backend();
  EXPECT_NE(engine::to_host_f32(tiny_model(*backend)->weights().master_flat()), single);  // it trained
}

TEST(LlamaTrainer, MoreMicroBatchesGiveTheSameUpdate) {
  const auto seqs = testing::random_sequences(6, 64, 12);
  TrainerOptions o = options();
  o.number_of_minibatches = 1;
  const auto one = train_single(o, {pack(seqs, range(0, 6))}, 2);
  const auto three = train_single(o, {pack(seqs, range(0, 1)), pack(seqs, range(1, 4)), pack(seqs, range(4, 6))}, 2);
  expect_close(one, three, 2e-5f);
}

TEST(LlamaTrainer, SentWeightsScoreLikeTheTrainer) {
  const auto seqs = testing::random_sequences(4, 64, 13);
  const MicroBatch probe = pack(seqs, range(0, 4));
  std::vector<std::vector<float>> scored(2);
  run_group(2, [&](int rank, engine::Communicator& comm) {
    auto backend = cpu_backend();
    auto model = tiny_model(*backend, rank == 0 ? 3 : 77);  // the receiver starts elsewhere
    ModelAdapter adapter(*model);
    if (rank == 0) {
      TrainerOptions o = options();
      o.weight_broadcast_free_grad_buffers = true;
      o.weight_broadcast_bucket_mb = 1;
      auto trainer = Trainer::create(o, adapter, nullptr, &comm);
      ASSERT_TRUE(trainer.ok());
      ASSERT_TRUE((*trainer)->train(std::vector<MicroBatch>{pack(seqs, {0, 1}), pack(seqs, {2, 3})}).ok());
      auto sent = (*trainer)->send_weights(1);
      ASSERT_TRUE(sent.ok()) << sent.status().message();
      EXPECT_TRUE(sent->freed_grad_buffers);
    } else {
      engine::WeightReceiver receiver(*backend, {adapter.param_specs(), adapter.flat_size(), "f32"}, comm);
      auto got = receiver.receive(adapter.params_flat());
      ASSERT_TRUE(got.ok()) << got.status().message();
      model->weights().sync_compute();
    }
    auto fwd = adapter.forward(probe, false);
    ASSERT_TRUE(fwd.ok());
    scored[rank] = engine::to_host_f32(fwd->logprobs);
  }, "llama-send");
  EXPECT_EQ(scored[0], scored[1]);
}

}  // namespace
}  // namespace rlrun::trainer
