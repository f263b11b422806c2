// Checkpoints: save, "kill" (drop every object), load, continue == an uninterrupted run, bit for
// bit; sharded checkpoints load into other rank counts; torn / corrupt / foreign checkpoints are
// never used; keep_last pruning. (The manifest and failed saves: checkpoint_integrity_test.cc.)
#include "trainer/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "bigram_test_double.h"
#include "trainer/train_step.h"
#include "trainer_test_util.h"

namespace rlrun::trainer {
namespace {

namespace fs = std::filesystem;
using testing::BigramTestDouble;
using testing::cpu_backend;
using testing::pack;
using testing::run_group;

constexpr int kVocab = 7;

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("rlrun_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TrainerOptions options(bool distributed) {
  TrainerOptions o;
  o.learning_rate_at = [](int64_t taken) { return 0.02 / (1.0 + taken); };
  o.optimizer.weight_decay = 0.01;
  o.optimizer.grad_clip = 0.3;
  o.optimizer.use_distributed_optimizer = distributed;
  o.number_of_minibatches = 2;
  return o;
}

// The micro-batches of trainer step s for `rank` of `ranks` (the same sequences overall).
std::vector<MicroBatch> batch_of(int step, int rank, int ranks) {
  const auto seqs = testing::random_sequences(8, kVocab, 100 + step);
  std::vector<MicroBatch> all;
  for (int i = 0; i < 4; ++i) all.push_back(pack(seqs, {2 * i, 2 * i + 1}));
  if (ranks == 1) return all;
  return {all[rank], all[2 + rank]};  // minibatch m = micro-batches {2m, 2m+1} over both ranks
}

// Runs steps [first, last) on `ranks` ranks, optionally loading `load_from` first and saving
// after step `save_at` into `root`. Returns rank 0's params (its bf16 weights, widened, when the
// distributed optimizer keeps the master of its shard).
std::vector<float> run(int ranks, bool distributed, int first, int last, const std::string& root, int save_at,
                       const std::string& load_from, uint64_t seed, CheckpointInfo* loaded = nullptr,
                       engine::DType weights = engine::DType::kF32) {
  std::vector<std::vector<float>> finals(ranks);
  auto body = [&](int rank, engine::Communicator* comm) {
    auto backend = cpu_backend();
    BigramTestDouble model(*backend, kVocab, seed, weights);
    auto trainer = Trainer::create(options(distributed), model, comm);
    ASSERT_TRUE(trainer.ok());
    const bool sharded_master = distributed && ranks > 1 && weights != engine::DType::kF32;
    EXPECT_EQ(model.params_flat().defined(), !sharded_master) << "the full master is released";
    if (!load_from.empty()) {
      auto info = (*trainer)->load_checkpoint(load_from);
      ASSERT_TRUE(info.ok()) << info.status().message();
      if (loaded != nullptr && rank == 0) *loaded = *info;
    }
    for (int s = first; s < last; ++s) {
      ASSERT_TRUE((*trainer)->train(batch_of(s, rank, ranks)).ok());
      if (s + 1 == save_at) {
        CheckpointExtras extras{R"({"prompt_index": 42})", "rng-state-bytes"};
        auto dir = (*trainer)->save_checkpoint(root, s + 1, extras);
        ASSERT_TRUE(dir.ok()) << dir.status().message();
      }
    }
    finals[rank] = engine::to_host_f32(sharded_master ? model.weights_flat() : model.params_flat());
  };
  if (ranks == 1) {
    body(0, nullptr);
  } else {
    static int group = 0;
    run_group(ranks, [&](int rank, engine::Communicator& comm) { body(rank, &comm); }, "ck" + std::to_string(group++));
  }
  for (int r = 1; r < ranks; ++r) EXPECT_EQ(finals[r], finals[0]);
  return finals[0];
}

TEST(Checkpoint, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const std::string root = fresh_dir("resume");
  const auto uninterrupted = run(1, false, 0, 4, "", -1, "", 1);
  run(1, false, 0, 2, root, 2, "", 1);  // then everything is dropped
  const std::vector<std::string> complete = complete_checkpoints(root);
  ASSERT_EQ(complete.size(), 1u);
  const std::string* latest = &complete[0];
  EXPECT_EQ(*latest, checkpoint_dir(root, 2));
  EXPECT_TRUE(verify_checkpoint(*latest).ok());
  CheckpointInfo info;
  // A different init seed: everything must come from the checkpoint.
  const auto resumed = run(1, false, 2, 4, "", -1, *latest, 99, &info);
  EXPECT_EQ(resumed, uninterrupted);
  EXPECT_EQ(info.step, 2);
  EXPECT_EQ(info.optimizer_step, 4);  // two minibatches per step
  EXPECT_EQ(info.extras.loader_state, R"({"prompt_index":42})");
  EXPECT_EQ(info.extras.rng_state, "rng-state-bytes");
  // The manifest alone, for a process without the model (the orchestrator resuming a run).
  const Result<CheckpointInfo> manifest = read_checkpoint_info(*latest);
  ASSERT_TRUE(manifest.ok()) << manifest.status().message();
  EXPECT_EQ(manifest->step, 2);
  EXPECT_EQ(manifest->optimizer_step, 4);
  EXPECT_EQ(manifest->extras.loader_state, R"({"prompt_index":42})");
  fs::remove(*latest + "/COMPLETE");
  EXPECT_EQ(read_checkpoint_info(*latest).status().code(), StatusCode::kNotFound);
  fs::remove_all(root);
}

TEST(Checkpoint, ShardedTwoRankResumeAndRankCountIndependence) {
  const std::string root = fresh_dir("sharded");
  const auto uninterrupted = run(2, true, 0, 3, "", -1, "", 1);
  run(2, true, 0, 1, root, 1, "", 1);
  const std::string dir = checkpoint_dir(root, 1);
  EXPECT_EQ(run(2, true, 1, 3, "", -1, dir, 5), uninterrupted);  // same layout: bit for bit
  // The moments were gathered, so one plain rank continues the same run (fp32 reduction order
  // differs, so within tolerance).
  const auto single = run(1, false, 1, 3, "", -1, dir, 5);
  ASSERT_EQ(single.size(), uninterrupted.size());
  for (size_t i = 0; i < single.size(); ++i) EXPECT_NEAR(single[i], uninterrupted[i], 1e-6f) << i;
  fs::remove_all(root);
}

// The distributed optimizer with bf16 weights keeps the f32 master of its shard only: a checkpoint
// gathers those shards (not the bf16 weights) and resumes bit for bit.
TEST(Checkpoint, ShardedMasterIsGatheredAndResumesBitForBit) {
  const std::string root = fresh_dir("master");
  constexpr engine::DType kBf16 = engine::DType::kBF16;
  const auto uninterrupted = run(2, true, 0, 3, "", -1, "", 1, nullptr, kBf16);
  const auto weights_at_1 = run(2, true, 0, 1, root, 1, "", 1, nullptr, kBf16);
  const std::string dir = checkpoint_dir(root, 1);
  EXPECT_EQ(run(2, true, 1, 3, "", -1, dir, 5, nullptr, kBf16), uninterrupted);
  // params.f32 read by one plain f32 rank: the f32 master, whose rounding is the bf16 weights.
  const auto master_at_1 = run(1, false, 1, 1, "", -1, dir, 5);
  ASSERT_EQ(master_at_1.size(), weights_at_1.size());
  int beyond_bf16 = 0;
  for (size_t i = 0; i < master_at_1.size(); ++i) {
    EXPECT_EQ(engine::bf16_to_f32(engine::f32_to_bf16(master_at_1[i])), weights_at_1[i]) << i;
    beyond_bf16 += master_at_1[i] != weights_at_1[i];
  }
  EXPECT_GT(beyond_bf16, 0) << "the checkpoint holds bf16 values, not the f32 master";
  // And the other way: an f32 checkpoint loads into the sharded bf16 ranks.
  run(1, false, 0, 1, root, 1, "", 1);
  EXPECT_EQ(run(2, true, 1, 1, "", -1, dir, 5, nullptr, kBf16).size(), master_at_1.size());
  fs::remove_all(root);
}

TEST(Checkpoint, TornAndTemporaryDirectoriesAreSkippedAndPruned) {
  const std::string root = fresh_dir("torn");
  EXPECT_TRUE(complete_checkpoints(root).empty());
  EXPECT_TRUE(complete_checkpoints(root + "/missing").empty());
  run(1, false, 0, 1, root, 1, "", 1);
  // A crash while writing step 5, and a step-9 directory that never got its COMPLETE marker.
  fs::create_directories(root + "/step-000005.tmp");
  fs::create_directories(root + "/step-000009");
  std::ofstream(root + "/step-000009/params.f32") << "partial";
  fs::create_directories(root + "/unrelated");
  EXPECT_EQ(complete_checkpoints(root), std::vector<std::string>{checkpoint_dir(root, 1)});
  auto backend = cpu_backend();
  BigramTestDouble model(*backend, kVocab, 1);
  auto opt = Optimizer::create(*backend, model.flat_size(), {}, OptimizerOptions{}, nullptr);
  ASSERT_TRUE(opt.ok());
  auto torn = load_checkpoint(root + "/step-000009", model, **opt, nullptr);
  ASSERT_FALSE(torn.ok());
  EXPECT_NE(torn.status().message().find("COMPLETE"), std::string::npos) << torn.status().message();
  // keep_last = 2 over saves at steps 2, 3: torn and tmp directories go, steps 2 and 3 stay.
  run(1, false, 0, 3, root, 2, "", 1);
  run(1, false, 0, 3, root, 3, "", 1);
  EXPECT_FALSE(fs::exists(root + "/step-000005.tmp"));
  EXPECT_FALSE(fs::exists(root + "/step-000009"));
  EXPECT_FALSE(fs::exists(checkpoint_dir(root, 1)));
  EXPECT_TRUE(fs::exists(checkpoint_dir(root, 2)));
  EXPECT_TRUE(fs::exists(checkpoint_dir(root, 3)));
  EXPECT_TRUE(fs::exists(root + "/unrelated"));
  fs::remove_all(root);
}

TEST(Checkpoint, CorruptTruncatedAndForeignCheckpointsAreErrors) {
  const std::string root = fresh_dir("corrupt");
  run(1, false, 0, 1, root, 1, "", 1);
  const std::string dir = checkpoint_dir(root, 1);
  auto try_load = [&](int64_t vocab) {
    auto backend = cpu_backend();
    BigramTestDouble model(*backend, vocab, 1);
    auto opt = Optimizer::create(*backend, model.flat_size(), {}, OptimizerOptions{}, nullptr);
    return load_checkpoint(dir, model, **opt, nullptr).status();
  };
  ASSERT_TRUE(try_load(kVocab).ok());
  Status foreign = try_load(kVocab + 1);
  EXPECT_NE(foreign.message().find("parameters"), std::string::npos) << foreign.message();
  {
    std::fstream f(dir + "/adam_v.f32", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(17);
    f.put('\x7f');
  }
  Status corrupt = try_load(kVocab);
  EXPECT_NE(corrupt.message().find("checksum"), std::string::npos) << corrupt.message();
  fs::resize_file(dir + "/params.f32", 12);
  Status truncated = try_load(kVocab);
  EXPECT_NE(truncated.message().find("bytes, expected"), std::string::npos) << truncated.message();
  std::ofstream(dir + "/trainer_state.json") << "{not json";
  EXPECT_FALSE(try_load(kVocab).ok());
  fs::remove_all(root);
}

TEST(Checkpoint, BadLoaderStateIsRejected) {
  const std::string root = fresh_dir("badloader");
  auto backend = cpu_backend();
  BigramTestDouble model(*backend, kVocab, 1);
  auto opt = Optimizer::create(*backend, model.flat_size(), {}, OptimizerOptions{}, nullptr);
  auto r = save_checkpoint(root, 1, CheckpointExtras{"{oops", ""}, model, **opt, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("loader_state"), std::string::npos);
  EXPECT_TRUE(complete_checkpoints(root).empty());
  fs::remove_all(root);
}

}  // namespace
}  // namespace rlrun::trainer
