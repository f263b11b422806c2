// The KL reference (kl_coef > 0) on the REAL decoder: the trainer's own frozen copy of the policy
// before its first RL update trains exactly like micro-batches that carry the reference log-probs
// themselves; it never moves; a checkpoint keeps it, so a resumed run trains bit for bit like an
// uninterrupted one.
#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include "engine/bf16.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/model/model.h"
#include "tests/engine/model/model_test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/model_adapter.h"
#include "trainer/train_step.h"
#include "trainer_test_util.h"

namespace rlrun::trainer {
namespace {

namespace fs = std::filesystem;
using testing::cpu_backend;
using testing::pack;

engine::ModelConfig tiny_config() { return engine::testing::tiny_config(/*qwen2=*/false); }

TrainerOptions options() {
  TrainerOptions o;
  o.learning_rate = 2e-2;
  o.optimizer.grad_clip = 1.0;
  o.loss.kl_coef = 0.5;
  return o;
}

std::vector<MicroBatch> batch_of(int step) {
  const auto seqs = testing::random_sequences(4, 64, 300 + step);
  return {pack(seqs, {0, 1}), pack(seqs, {2, 3})};
}

// A policy and its KL reference (same config, grads released as the trainer process does).
struct PolicyWithReference {
  std::unique_ptr<engine::Backend> backend = cpu_backend();
  std::unique_ptr<engine::Model> model, reference;
  std::unique_ptr<ModelAdapter> adapter, reference_adapter;
  std::unique_ptr<Trainer> trainer;

  // kBf16Cache: compute_dtype: bf16 on a CPU (the backend rounds the products' operands).
  explicit PolicyWithReference(bool with_reference = true,
                               engine::WeightStorage storage = engine::WeightStorage::kF32) {
    engine::ModelOptions o;
    o.weight_storage = storage;
    if (storage == engine::WeightStorage::kBf16Cache) {
      EXPECT_TRUE(backend->set_matmul_bf16(true));
    }
    model = std::move(engine::Model::create(*backend, tiny_config(), o)).value();
    model->weights().init_random(5, 0.2f);
    adapter = std::make_unique<ModelAdapter>(*model);
    trainer = std::move(Trainer::create(options(), *adapter, nullptr)).value();
    if (!with_reference) return;
    reference = std::move(engine::Model::create(*backend, tiny_config(), o)).value();
    reference->weights().release_grads();
    reference_adapter = std::make_unique<ModelAdapter>(*reference);
    trainer->set_reference(reference_adapter.get());
  }
  std::vector<float> params() { return engine::to_host_f32(adapter->params_flat()); }
  std::vector<float> reference_weights() { return engine::to_host_f32(reference_adapter->weights_flat()); }
  StepReport train(int step, TrainObjective objective = TrainObjective::kPolicy) {
    Result<StepReport> r = trainer->train(batch_of(step), objective);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : StepReport{};
  }
};

// Each bf16 matrix of a kBf16Cache model is its f32 master rounded: the copy the products read
// followed every write of the master.
void expect_bf16_copies_follow(const engine::Model& m, const std::string& when) {
  const engine::ModelWeights& w = m.weights();
  for (size_t i = 0; i < w.params().size(); ++i) {
    if (w.compute(i).dtype() != engine::DType::kBF16) continue;
    const std::vector<float> master = engine::to_host_f32(w.master(i)), copy = engine::to_host_f32(w.compute(i));
    for (size_t e = 0; e < master.size(); ++e)
      ASSERT_EQ(copy[e], engine::bf16_to_f32(engine::f32_to_bf16(master[e]))) << w.params()[i].name << " " << when;
  }
}

double ref_kl(const StepReport& r) { return r.minibatches.at(0).loss.stats.ref_kl_sum; }

TEST(KlReference, IsThePolicyBeforeItsFirstRlUpdateAndNeverMoves) {
  PolicyWithReference p;
  p.train(0, TrainObjective::kSupervised);  // a format warm-start step: not yet the reference
  EXPECT_FALSE(p.trainer->reference_captured());
  const std::vector<float> initial = p.params();
  const StepReport first = p.train(1);
  EXPECT_TRUE(p.trainer->reference_captured());
  EXPECT_EQ(ref_kl(first), 0.0) << "the reference scores with the policy's own weights at the first step";
  EXPECT_GT(first.seconds_reference, 0.0);
  EXPECT_EQ(p.reference_weights(), initial);
  EXPECT_NE(p.params(), initial) << "it trained";
  const StepReport later = p.train(2);
  EXPECT_GT(ref_kl(later), 0.0);
  EXPECT_GT(later.minibatches.at(0).loss.kl_loss, 0.0);
  EXPECT_EQ(p.reference_weights(), initial) << "the reference never trains";
}

TEST(KlReference, TrainsLikeMicroBatchesCarryingTheReferenceLogprobs) {
  PolicyWithReference with;
  PolicyWithReference without(/*with_reference=*/false);
  for (int s = 0; s < 3; ++s) {
    with.train(s);
    std::vector<MicroBatch> mbs = batch_of(s);
    for (MicroBatch& mb : mbs) {  // scored by a fresh copy of the initial policy
      PolicyWithReference initial(/*with_reference=*/false);
      mb.ref_logprobs = engine::to_host_f32(initial.adapter->forward(mb, false)->logprobs);
    }
    ASSERT_TRUE(without.trainer->train(mbs).ok());
  }
  EXPECT_EQ(with.params(), without.params());
  // And the term matters: without it the weights differ.
  PolicyWithReference no_kl(false);
  TrainerOptions o = options();
  o.loss.kl_coef = 0.0;
  no_kl.trainer = std::move(Trainer::create(o, *no_kl.adapter, nullptr)).value();
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(no_kl.trainer->train(batch_of(s)).ok());
  EXPECT_NE(no_kl.params(), with.params());
}

// kl_reference_on: rollout. Micro-batches that come with ref_logprobs (scored by the rollout
// workers) train with those; the others are scored by the trainer's copy, which is captured all
// the same (checkpoints keep it).
TEST(KlReference, MicroBatchesThatCarryReferenceLogprobsAreNotScoredAgain) {
  PolicyWithReference p;
  std::vector<MicroBatch> mbs = batch_of(1);
  mbs[0].ref_logprobs = engine::to_host_f32(p.adapter->forward(mbs[0], false)->logprobs);
  for (float& v : mbs[0].ref_logprobs) v -= 0.25f;  // not the policy's: the step must use these
  Result<StepReport> r = p.trainer->train(mbs);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(p.trainer->reference_captured());
  // At the first step the trainer's reference IS the policy (x = 0 on micro-batch 1, which it
  // scored); micro-batch 0 carried x = 0.25 on every trained token.
  double trained0 = 0;
  for (uint8_t m : mbs[0].loss_mask) trained0 += m;
  const double k3 = std::exp(-0.25) - 1 + 0.25;
  EXPECT_NEAR(ref_kl(*r), k3 * trained0, 1e-3 * k3 * trained0);
  EXPECT_EQ(r->reference_tokens, mbs[1].num_tokens()) << "only the micro-batch without them was scored";
}

TEST(KlReference, NonFiniteCarriedReferenceLogprobsAreRefused) {
  PolicyWithReference p;
  std::vector<MicroBatch> mbs = batch_of(1);
  mbs[1].ref_logprobs.assign(static_cast<size_t>(mbs[1].num_tokens()), std::nanf(""));
  Result<StepReport> r = p.trainer->train(mbs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ref_logprobs"), std::string::npos) << r.status().message();
  mbs[1].ref_logprobs.assign(3, 0.0f);  // the wrong length
  r = p.trainer->train(mbs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ref_logprobs"), std::string::npos) << r.status().message();
}

TEST(KlReference, WithoutAReferenceTheMicroBatchesMustCarryItsLogprobs) {
  PolicyWithReference p(/*with_reference=*/false);
  Result<StepReport> r = p.trainer->train(batch_of(0));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ref_logprobs"), std::string::npos) << r.status().message();
}

TEST(KlReference, ACheckpointKeepsItAndResumesBitForBit) {
  const std::string root = (fs::temp_directory_path() / ("rlrun_kl_ref_" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  PolicyWithReference whole;
  for (int s = 0; s < 4; ++s) whole.train(s);

  std::string saved;
  std::vector<float> reference;
  {
    PolicyWithReference first;
    first.train(0);
    first.train(1);
    reference = first.reference_weights();
    Result<std::string> dir = first.trainer->save_checkpoint(root, 2, {});
    ASSERT_TRUE(dir.ok()) << dir.status().message();
    saved = *dir;
  }
  EXPECT_TRUE(fs::exists(saved + "/reference.f32"));
  PolicyWithReference resumed;
  Result<CheckpointInfo> info = resumed.trainer->load_checkpoint(saved);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_TRUE(info->reference_loaded);
  EXPECT_TRUE(resumed.trainer->reference_captured());
  EXPECT_EQ(resumed.reference_weights(), reference) << "the initial policy, not the checkpoint's weights";
  resumed.train(2);
  resumed.train(3);
  EXPECT_EQ(resumed.params(), whole.params());

  // A checkpoint saved without a reference leaves it to be captured from the loaded weights.
  PolicyWithReference plain(false);
  plain.train(0, TrainObjective::kSupervised);
  ASSERT_TRUE(plain.trainer->save_checkpoint(root, 7, {}).ok());
  PolicyWithReference later;
  info = later.trainer->load_checkpoint(checkpoint_dir(root, 7));
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_FALSE(info->reference_loaded);
  EXPECT_FALSE(later.trainer->reference_captured());
  const std::vector<float> loaded = later.params();
  later.train(1);
  EXPECT_EQ(later.reference_weights(), loaded);
  fs::remove_all(root);
}

TEST(KlReference, ComputeDtypeBf16KeepsTheBf16CopiesOnTheirMasters) {
  if (!engine::cpu::bf16_gemm_native()) GTEST_SKIP() << "no native bf16 products on this CPU";
  const std::string root = fs::temp_directory_path() / ("rlrun_kl_bf16_" + std::to_string(::getpid()));
  fs::remove_all(root);
  constexpr auto kCached = engine::WeightStorage::kBf16Cache;
  PolicyWithReference whole(true, kCached);
  for (int s = 0; s < 4; ++s) {
    whole.train(s, s == 0 ? TrainObjective::kSupervised : TrainObjective::kPolicy);
    expect_bf16_copies_follow(*whole.model, "after step " + std::to_string(s));
    if (s > 0) expect_bf16_copies_follow(*whole.reference, "the reference after step " + std::to_string(s));
  }
  std::string saved;
  {
    PolicyWithReference first(true, kCached);
    first.train(0, TrainObjective::kSupervised);
    first.train(1);
    Result<std::string> dir = first.trainer->save_checkpoint(root, 2, {});
    ASSERT_TRUE(dir.ok()) << dir.status().message();
    saved = *dir;
  }
  PolicyWithReference resumed(true, kCached);
  ASSERT_TRUE(resumed.trainer->load_checkpoint(saved).ok());
  expect_bf16_copies_follow(*resumed.model, "after a checkpoint load");
  expect_bf16_copies_follow(*resumed.reference, "the reference after a checkpoint load");
  resumed.train(2);
  resumed.train(3);
  EXPECT_EQ(resumed.params(), whole.params()) << "resumed from its checkpoint, it trains bit for bit as before";
  fs::remove_all(root);
}

}  // namespace
}  // namespace rlrun::trainer
