// Trainer::train over the bigram TEST DOUBLE (bigram_test_double.h): rank and micro-batch split
// invariance of the update, PPO clip reference modes, skipped empty minibatches, metrics.
#include "trainer/train_step.h"

#include <gtest/gtest.h>

#include "bigram_test_double.h"
#include "trainer_test_util.h"

namespace rlrun::trainer {
namespace {

using testing::BigramTestDouble;
using testing::cpu_backend;
using testing::pack;
using testing::range;
using testing::run_group;

constexpr int kVocab = 7;

TrainerOptions base_options() {
  TrainerOptions o;
  o.learning_rate = 0.05;
  o.optimizer.grad_clip = 0.0;
  o.optimizer.weight_decay = 0.01;
  o.number_of_minibatches = 2;
  o.loss.entropy_coef = 0.01;
  o.loss.aggregation = LossAggregation::kTokenMean;
  return o;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "element " << i;
}

// One rank, the given micro-batches; returns the final params.
std::vector<float> train_single(const TrainerOptions& o, const std::vector<MicroBatch>& mbs, int steps,
                                std::vector<StepReport>* reports = nullptr,
                                TrainObjective objective = TrainObjective::kPolicy) {
  auto backend = cpu_backend();
  BigramTestDouble model(*backend, kVocab, 7);
  auto trainer = Trainer::create(o, model, nullptr);
  EXPECT_TRUE(trainer.ok()) << trainer.status().message();
  for (int s = 0; s < steps; ++s) {
    auto r = (*trainer)->train(mbs, objective);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (reports != nullptr && r.ok()) reports->push_back(*r);
  }
  return engine::to_host_f32(model.params_flat());
}

TEST(TrainStep, TwoRanksWithHalfTheBatchEachEqualOneRank) {
  const auto seqs = testing::random_sequences(8, kVocab, 1);
  // micro-batch i holds sequences 2i, 2i+1. One rank: [0 1 | 2 3] (two minibatches). Two ranks:
  // rank 0 [0 | 2], rank 1 [1 | 3], so minibatch m is the same sequences in both runs.
  std::vector<MicroBatch> all;
  for (int i = 0; i < 4; ++i) all.push_back(pack(seqs, {2 * i, 2 * i + 1}));
  for (bool distributed : {false, true}) {
    TrainerOptions o = base_options();
    o.optimizer.use_distributed_optimizer = distributed;
    o.optimizer.grad_clip = 0.5;  // the global norm must be global
    std::vector<StepReport> single_reports;
    const auto single = train_single(o, all, 2, &single_reports);
    std::vector<std::vector<float>> finals(2);
    std::vector<StepReport> rank0_reports;
    run_group(2, [&](int rank, engine::Communicator& comm) {
      auto backend = cpu_backend();
      BigramTestDouble model(*backend, kVocab, 7);
      auto trainer = Trainer::create(o, model, &comm);
      ASSERT_TRUE(trainer.ok());
      const std::vector<MicroBatch> mine = {all[rank], all[2 + rank]};
      for (int s = 0; s < 2; ++s) {
        auto r = (*trainer)->train(mine);
        ASSERT_TRUE(r.ok()) << r.status().message();
        if (rank == 0) rank0_reports.push_back(*r);
      }
      finals[rank] = engine::to_host_f32(model.params_flat());
    }, distributed ? "ts-d" : "ts-p");
    EXPECT_EQ(finals[0], finals[1]);
    expect_close(finals[0], single, 2e-6f);
    // Loss, clip statistics and token counts are global, so they match the single rank's.
    const auto a = single_reports[1].metrics(), b = rank0_reports[1].metrics();
    EXPECT_NEAR(a.at("loss"), b.at("loss"), 1e-6);
    EXPECT_NEAR(a.at("grad_norm"), b.at("grad_norm"), 1e-5);
    EXPECT_EQ(a.at("trained_tokens"), b.at("trained_tokens"));
    EXPECT_EQ(a.at("clip_low_fraction"), b.at("clip_low_fraction"));
    EXPECT_NEAR(a.at("entropy"), b.at("entropy"), 1e-6);
  }
}

TEST(TrainStep, ABadBatchOnOneRankFailsEveryRankWithoutHanging) {
  const auto seqs = testing::random_sequences(4, kVocab, 6);
  for (int bad_kind : {0, 1}) {
    std::vector<Status> results(2);
    run_group(2, [&](int rank, engine::Communicator& comm) {
      auto backend = cpu_backend();
      BigramTestDouble model(*backend, kVocab, 7);
      auto trainer = Trainer::create(base_options(), model, &comm);
      ASSERT_TRUE(trainer.ok());
      std::vector<MicroBatch> mbs = {pack(seqs, {2 * rank}), pack(seqs, {2 * rank + 1})};
      if (rank == 1 && bad_kind == 0) mbs[1].loss_mask.pop_back();  // malformed
      if (rank == 1 && bad_kind == 1) mbs.push_back(pack(seqs, {0}));  // one micro-batch too many
      results[rank] = (*trainer)->train(mbs).status();
    }, "bad" + std::to_string(bad_kind));
    EXPECT_FALSE(results[0].ok());
    EXPECT_FALSE(results[1].ok());
    EXPECT_NE(results[bad_kind == 0 ? 1 : 0].message().find(bad_kind == 0 ? "loss_mask" : "same number"),
              std::string::npos) << results[0].message() << " / " << results[1].message();
  }
}

TEST(TrainStep, MoreMicroBatchesGiveTheSameUpdate) {
  const auto seqs = testing::random_sequences(9, kVocab, 2);
  TrainerOptions o = base_options();
  o.number_of_minibatches = 1;
  for (LossAggregation agg : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean}) {
    o.loss.aggregation = agg;
    const auto one = train_single(o, {pack(seqs, range(0, 9))}, 3);
    const auto three = train_single(o, {pack(seqs, range(0, 2)), pack(seqs, range(2, 7)), pack(seqs, range(7, 9))}, 3);
    expect_close(one, three, 2e-6f);
    EXPECT_NE(one, train_single(o, {pack(seqs, range(0, 8))}, 3));  // the data matters
  }
}

TEST(TrainStep, BatchClipReferenceStartsAtRatioOne) {
  const auto seqs = testing::random_sequences(6, kVocab, 3);
  const std::vector<MicroBatch> mbs = {pack(seqs, range(0, 3)), pack(seqs, range(3, 6))};
  TrainerOptions o = base_options();
  o.loss.ppo_clip_ref = ClipReference::kBatch;
  std::vector<StepReport> reports;
  train_single(o, mbs, 1, &reports);
  const PolicyLossStats& first = reports[0].minibatches[0].loss.stats;
  EXPECT_NEAR(first.ratio_min, 1.0, 1e-6);  // same weights as the recomputation
  EXPECT_NEAR(first.ratio_max, 1.0, 1e-6);
  const PolicyLossStats& second = reports[0].minibatches[1].loss.stats;
  EXPECT_GT(second.ratio_max - second.ratio_min, 1e-6);  // after one update the policy moved
  EXPECT_GT(reports[0].seconds_recompute, 0.0);
  // One minibatch: no recomputation pass, and the ratio is exactly 1.
  o.number_of_minibatches = 1;
  reports.clear();
  train_single(o, mbs, 1, &reports);
  EXPECT_EQ(reports[0].seconds_recompute, 0.0);
  EXPECT_EQ(reports[0].minibatches[0].loss.stats.ratio_min, 1.0);
  EXPECT_EQ(reports[0].minibatches[0].loss.stats.ratio_max, 1.0);
  o.number_of_minibatches = 2;
  // With the rollout reference the ratios reflect the (random) rollout log-probs.
  o.loss.ppo_clip_ref = ClipReference::kRollout;
  reports.clear();
  train_single(o, mbs, 1, &reports);
  EXPECT_GT(reports[0].minibatches[0].loss.stats.ratio_max - reports[0].minibatches[0].loss.stats.ratio_min, 0.1);
}

// The format warm-start's batches: the trainer's own log-probs are the reference, so the update
// is the likelihood step whatever rollout log-probs the batch carries, and it equals a policy step
// whose reference is those same log-probs (ratio 1) without the entropy term.
TEST(TrainStep, SupervisedObjectiveIgnoresRolloutLogprobsAndIsTheRatioOneStep) {
  auto seqs = testing::random_sequences(6, kVocab, 4);
  std::vector<MicroBatch> mbs = {pack(seqs, range(0, 3)), pack(seqs, range(3, 6))};
  for (MicroBatch& mb : mbs) std::fill(mb.advantages.begin(), mb.advantages.end(), 1.0f);
  std::vector<MicroBatch> shifted = mbs;
  for (MicroBatch& mb : shifted)
    for (float& lp : mb.rollout_logprobs) lp -= 5.0f;  // far off: a policy step would clip everything
  TrainerOptions o = base_options();
  o.number_of_minibatches = 1;
  std::vector<StepReport> reports;
  const auto supervised = train_single(o, mbs, 2, &reports, TrainObjective::kSupervised);
  EXPECT_EQ(reports[0].minibatches[0].loss.stats.ratio_min, 1.0);
  EXPECT_EQ(reports[0].minibatches[0].loss.stats.ratio_max, 1.0);
  expect_close(supervised, train_single(o, shifted, 2, nullptr, TrainObjective::kSupervised), 0.0f);
  EXPECT_NE(supervised, train_single(o, shifted, 2));  // the policy objective reads them

  TrainerOptions ratio_one = o;
  ratio_one.loss.ppo_clip_ref = ClipReference::kBatch;
  ratio_one.loss.entropy_coef = 0.0;
  expect_close(supervised, train_single(ratio_one, shifted, 2), 1e-7f);
}

TEST(TrainStep, MinibatchWithoutTrainedTokensIsSkippedEverywhere) {
  auto seqs = testing::random_sequences(4, kVocab, 4);
  for (auto& s : seqs) std::fill(s.mask.begin(), s.mask.end(), 0);
  std::vector<StepReport> reports;
  TrainerOptions o = base_options();
  auto before = train_single(o, {pack(seqs, {0}), pack(seqs, {1})}, 0);
  auto after = train_single(o, {pack(seqs, {0}), pack(seqs, {1})}, 1, &reports);
  EXPECT_EQ(before, after);
  EXPECT_TRUE(reports[0].minibatches[0].skipped_no_tokens);
  EXPECT_EQ(reports[0].metrics().at("skipped_minibatches"), 2.0);
}

TEST(TrainStep, ReportsMetricsAndValidates) {
  const auto seqs = testing::random_sequences(4, kVocab, 5);
  std::vector<StepReport> reports;
  TrainerOptions o = base_options();
  o.learning_rate_at = [](int64_t taken) { return 0.01 * (taken + 1); };
  train_single(o, {pack(seqs, {0, 1}), pack(seqs, {2, 3})}, 1, &reports);
  const auto m = reports[0].metrics();
  EXPECT_EQ(m.at("optimizer_steps"), 2.0);
  EXPECT_NEAR(m.at("learning_rate"), 0.02, 1e-12);  // the second step of the schedule
  EXPECT_GT(m.at("entropy"), 0.0);
  EXPECT_GT(m.at("grad_norm"), 0.0);
  EXPECT_GT(m.at("tokens"), 0.0);
  EXPECT_GT(m.at("memory_forward_backward_backend_peak_bytes"), 0.0);

  auto backend = cpu_backend();
  BigramTestDouble model(*backend, kVocab, 7);
  auto trainer = Trainer::create(base_options(), model, nullptr);
  ASSERT_TRUE(trainer.ok());
  EXPECT_FALSE((*trainer)->train(std::vector<MicroBatch>{pack(seqs, {0})}).ok());  // 1 micro-batch, 2 minibatches
  MicroBatch bad = pack(seqs, {0, 1});
  bad.cu_seqlens.back() += 1;
  EXPECT_FALSE((*trainer)->train(std::vector<MicroBatch>{bad, bad}).ok());
  bad = pack(seqs, {0, 1});
  bad.advantages[1] = NAN;
  EXPECT_FALSE((*trainer)->train(std::vector<MicroBatch>{bad, bad}).ok());
  bad = pack(seqs, {0, 1});
  for (size_t t = 0; t < bad.loss_mask.size(); ++t) {
    if (bad.loss_mask[t]) bad.rollout_logprobs[t] = INFINITY;
  }
  auto inf = (*trainer)->train(std::vector<MicroBatch>{bad, bad});
  ASSERT_FALSE(inf.ok());
  EXPECT_NE(inf.status().message().find("rollout_logprobs"), std::string::npos) << inf.status().message();
  TrainerOptions zero = base_options();
  zero.number_of_minibatches = 0;
  EXPECT_FALSE(Trainer::create(zero, model, nullptr).ok());
}

TEST(TrainStep, PhaseMemoryWithAResidentMemoryTracker) {
  const auto seqs = testing::random_sequences(4, kVocab, 8);
  auto backend = cpu_backend();
  BigramTestDouble model(*backend, kVocab, 7);
  PeakMemoryTracker memory;
  auto trainer = Trainer::create(base_options(), model, nullptr, nullptr, &memory);
  ASSERT_TRUE(trainer.ok());
  auto r = (*trainer)->train(std::vector<MicroBatch>{pack(seqs, {0, 1}), pack(seqs, {2, 3})});
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->memory_forward_backward.rss_peak_bytes, 0);
  EXPECT_GT(r->memory_optimizer.rss_peak_bytes, 0);
  EXPECT_GE(r->memory_forward_backward.backend_peak_bytes, r->memory_forward_backward.backend_in_use_begin);
  EXPECT_GT(r->metrics().at("memory_optimizer_rss_peak_bytes"), 0.0);
}

TEST(MicroBatch, ShiftsTokenAlignedArraysToPredictions) {
  // two sequences: [5 6 7] mask [0 1 1], [8 9] mask [0 1]
  auto mb = make_micro_batch(std::vector<int32_t>{5, 6, 7, 8, 9}, std::vector<int32_t>{0, 1, 2, 0, 1},
                             std::vector<int32_t>{0, 3, 5}, std::vector<uint8_t>{0, 1, 1, 0, 1},
                             std::vector<float>{1.5f, -1}, std::vector<float>{0, -0.1f, -0.2f, 0, -0.3f});
  ASSERT_TRUE(mb.ok()) << mb.status().message();
  EXPECT_EQ(mb->targets, (std::vector<int32_t>{6, 7, -1, 9, -1}));
  EXPECT_EQ(mb->loss_mask, (std::vector<uint8_t>{1, 1, 0, 1, 0}));
  EXPECT_EQ(mb->rollout_logprobs, (std::vector<float>{-0.1f, -0.2f, 0, -0.3f, 0}));
  EXPECT_EQ(mb->advantages, (std::vector<float>{1.5f, -1}));
  EXPECT_FALSE(make_micro_batch(std::vector<int32_t>{1, 2}, std::vector<int32_t>{0, 1}, std::vector<int32_t>{0, 3},
                                std::vector<uint8_t>{0, 1}, std::vector<float>{1}, std::vector<float>{0, 0})
                   .ok());
}

// A prompt [5 6 7] shared by two samples ([7] 8 9 and [7] 4): expanding it writes the prompt out
// before each sample, exactly the micro-batch of the repeated layout; a prefix may train nothing.
TEST(MicroBatch, ExpandingSharedPrefixesGivesTheRepeatedLayout) {
  auto shared = make_micro_batch(std::vector<int32_t>{5, 6, 7, 8, 9, 7, 4}, std::vector<int32_t>{0, 1, 2, 3, 4, 2, 3},
                                 std::vector<int32_t>{0, 2, 5, 7}, std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 1},
                                 std::vector<float>{0, 1.5f, -1}, std::vector<float>{0, 0, 0, -0.1f, -0.2f, 0, -0.3f},
                                 std::vector<int32_t>{-1, 0, 0});
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  EXPECT_TRUE(validate_micro_batch(*shared, false).ok());
  auto repeated = make_micro_batch(std::vector<int32_t>{5, 6, 7, 8, 9, 5, 6, 7, 4},
                                   std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 3}, std::vector<int32_t>{0, 5, 9},
                                   std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 0, 0, 1}, std::vector<float>{1.5f, -1},
                                   std::vector<float>{0, 0, 0, -0.1f, -0.2f, 0, 0, 0, -0.3f});
  ASSERT_TRUE(repeated.ok());
  const MicroBatch expanded = expand_shared_prefixes(*shared);
  EXPECT_TRUE(expanded.prefix_of.empty());
  EXPECT_EQ(expanded.input_ids, repeated->input_ids);
  EXPECT_EQ(expanded.position_ids, repeated->position_ids);
  EXPECT_EQ(expanded.cu_seqlens, repeated->cu_seqlens);
  // The prompt's last prediction (6 -> 7) is untrained in both; only masks and targets of
  // trained predictions matter to the loss.
  EXPECT_EQ(expanded.loss_mask, repeated->loss_mask);
  EXPECT_EQ(expanded.rollout_logprobs, repeated->rollout_logprobs);
  EXPECT_EQ(expanded.advantages, repeated->advantages);
  for (size_t t = 0; t < expanded.targets.size(); ++t) {
    if (repeated->loss_mask[t]) {
      EXPECT_EQ(expanded.targets[t], repeated->targets[t]) << t;
    }
  }

  MicroBatch bad = *shared;
  bad.loss_mask[0] = 1;  // the prefix trains a token
  EXPECT_EQ(validate_micro_batch(bad, false).code(), StatusCode::kInvalidArgument);
  bad = *shared;
  bad.prefix_of = {-1, 2, 0};  // continues a later sequence
  EXPECT_EQ(validate_micro_batch(bad, false).code(), StatusCode::kInvalidArgument);
  bad.prefix_of = {-1, 0};
  EXPECT_EQ(validate_micro_batch(bad, false).code(), StatusCode::kInvalidArgument);
}

// Two groups whose prompts begin alike ([5 6 7 8] and [5 6 9 3]): their shared prefixes [5 6 7]
// and [5 6 9] start with [5 6], which becomes a sequence of its own that both continue. Written
// out, it is the same micro-batch as before; nothing changes without a common start or with one
// shared prompt.
TEST(MicroBatch, TheGroupsCommonPromptStartIsComputedOnce) {
  auto two_groups = [](int32_t b_first) {
    return make_micro_batch(std::vector<int32_t>{5, 6, 7, 8, 10, 11, 8, 12, b_first, 6, 9, 3, 13},
                            std::vector<int32_t>{0, 1, 2, 3, 4, 5, 3, 4, 0, 1, 2, 3, 4},
                            std::vector<int32_t>{0, 3, 6, 8, 11, 13}, std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 1},
                            std::vector<float>{0, 1.5f, -1, 0, 0.5f},
                            std::vector<float>{0, 0, 0, 0, -0.1f, -0.2f, 0, -0.3f, 0, 0, 0, 0, -0.4f},
                            std::vector<int32_t>{-1, 0, 0, -1, 3});
  };
  auto before = two_groups(5);
  ASSERT_TRUE(before.ok()) << before.status().message();
  MicroBatch shared = *before;
  share_common_prefix(shared);
  EXPECT_EQ(shared.input_ids, (std::vector<int32_t>{5, 6, 7, 8, 10, 11, 8, 12, 9, 3, 13}));
  EXPECT_EQ(shared.position_ids, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 3, 4, 2, 3, 4}));
  EXPECT_EQ(shared.cu_seqlens, (std::vector<int32_t>{0, 2, 3, 6, 8, 9, 11}));
  EXPECT_EQ(shared.prefix_of, (std::vector<int32_t>{-1, 0, 1, 1, 0, 4}));
  EXPECT_EQ(shared.advantages, (std::vector<float>{0, 0, 1.5f, -1, 0, 0.5f}));
  EXPECT_TRUE(validate_micro_batch(shared, false).ok());
  const MicroBatch a = expand_shared_prefixes(*before), b = expand_shared_prefixes(shared);
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.position_ids, b.position_ids);
  EXPECT_EQ(a.cu_seqlens, b.cu_seqlens);
  EXPECT_EQ(a.loss_mask, b.loss_mask);
  EXPECT_EQ(a.targets, b.targets);  // untrained predictions have none in either
  EXPECT_EQ(a.rollout_logprobs, b.rollout_logprobs);
  EXPECT_EQ(a.advantages, b.advantages);
  share_common_prefix(shared);  // once is all: the common start is the only prompt left at the top
  EXPECT_EQ(shared.cu_seqlens.size(), 7u);

  auto differ = two_groups(4);  // [4 6 9]: no common start
  ASSERT_TRUE(differ.ok());
  MicroBatch unchanged = *differ;
  share_common_prefix(unchanged);
  EXPECT_EQ(unchanged.input_ids, differ->input_ids);
  EXPECT_EQ(unchanged.prefix_of, differ->prefix_of);
  MicroBatch one_group = *before;
  one_group.prefix_of = {-1, 0, 0, -1, -1};  // the second group's sample stands alone
  share_common_prefix(one_group);
  EXPECT_EQ(one_group.input_ids, before->input_ids);
}

}  // namespace
}  // namespace rlrun::trainer
