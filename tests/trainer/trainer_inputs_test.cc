// Trainer inputs: options from the run config, micro-batches from a TrainBatch message.
#include "trainer/trainer_inputs.h"

#include <gtest/gtest.h>

namespace rlrun::trainer {
namespace {

// Two rows of 4 tokens, two micro-batches of one row:
//   row 0: sequence [1 2 3] (mask 0 1 1, advantage 0.5) + one padding token
//   row 1: sequence [4 5] (mask 0 1, advantage -1) + two padding tokens
TrainBatch sample_batch() {
  TrainBatch b;
  b.step = 7;
  b.num_rows = 2;
  b.row_len = 4;
  b.num_micro_batches = 2;
  b.micro_batch_row_offsets = {0, 1, 2};
  b.input_ids = {1, 2, 3, 0, 4, 5, 0, 0};
  b.position_ids = {0, 1, 2, 0, 0, 1, 0, 1};
  b.cu_seqlens = {0, 3, 4, 6, 8};
  b.loss_mask = {0, 1, 1, 0, 0, 1, 0, 0};
  b.advantages = {0.5f, 0.5f, 0.5f, 0, -1, -1, 0, 0};
  b.rollout_logprobs = {0, -0.1f, -0.2f, 0, 0, -0.3f, 0, 0};
  return b;
}

TEST(TrainerInputs, MicroBatchesFromTrainBatch) {
  auto mbs = micro_batches_from_train_batch(sample_batch());
  ASSERT_TRUE(mbs.ok()) << mbs.status().message();
  ASSERT_EQ(mbs->size(), 2u);
  // Padding segments train nothing and are not computed (drop_untrained_sequences).
  const MicroBatch& a = (*mbs)[0];
  EXPECT_EQ(a.cu_seqlens, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(a.targets, (std::vector<int32_t>{2, 3, -1}));
  EXPECT_EQ(a.loss_mask, (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_EQ(a.rollout_logprobs, (std::vector<float>{-0.1f, -0.2f, 0}));
  EXPECT_EQ(a.advantages, (std::vector<float>{0.5f}));  // per sequence
  const MicroBatch& b = (*mbs)[1];
  EXPECT_EQ(b.cu_seqlens, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(b.input_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{5, -1}));
  EXPECT_EQ(b.loss_mask, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(b.advantages, (std::vector<float>{-1.0f}));
}

// A shared prompt is kept for its trained continuation; a continuation that trains nothing, and
// a micro-batch of nothing trained, are dropped (the latter becomes empty).
TEST(TrainerInputs, UntrainedSequencesAreDroppedButPrefixesOfTrainedOnesKept) {
  MicroBatch mb;
  mb.input_ids = {5, 6, 7, 8, 7, 4, 9, 9};
  mb.position_ids = {0, 1, 2, 3, 2, 3, 0, 1};
  mb.cu_seqlens = {0, 2, 4, 6, 8};
  mb.prefix_of = {-1, 0, 0, -1};
  mb.targets = {6, -1, 8, -1, 4, -1, 9, -1};
  mb.loss_mask = {0, 0, 1, 0, 0, 0, 0, 0};
  mb.rollout_logprobs = {0, 0, -0.5f, 0, 0, 0, 0, 0};
  mb.advantages = {0, 1.5f, -2, 0};
  drop_untrained_sequences(mb);
  EXPECT_EQ(mb.input_ids, (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(mb.cu_seqlens, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(mb.prefix_of, (std::vector<int32_t>{-1, 0}));
  EXPECT_EQ(mb.advantages, (std::vector<float>{0, 1.5f}));
  EXPECT_TRUE(validate_micro_batch(mb, false).ok());
  mb.loss_mask.assign(4, 0);
  drop_untrained_sequences(mb);
  EXPECT_EQ(mb.num_tokens(), 0);
}

TEST(TrainerInputs, MalformedTrainBatchesAreProtocolErrors) {
  std::vector<TrainBatch> bad(6, sample_batch());
  bad[0].input_ids = {1, 2, 3};
  bad[1].micro_batch_row_offsets = {0, 2, 1};
  bad[2].cu_seqlens = {0, 3, 5, 8};  // a sequence straddles the micro-batches
  bad[3].cu_seqlens = {0, 3, 3, 8};
  bad[4].num_micro_batches = 3;
  bad[5].cu_seqlens = {0, 3, 4, 6};  // does not cover the padding
  for (size_t i = 0; i < bad.size(); ++i) {
    auto r = micro_batches_from_train_batch(bad[i]);
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_EQ(r.status().code(), StatusCode::kProtocol) << i << ": " << r.status().message();
  }
}

TEST(TrainerInputs, OptionsFromConfig) {
  Config c;
  c.algorithm = rlrun::Algorithm::kDrGrpo;
  c.loss_aggregation = rlrun::LossAggregation::kTokenMean;
  c.ppo_clip_ref_logprobs = ClipRefLogprobs::kBatch;
  c.use_tis = true;
  c.tis_mode = rlrun::TisMode::kIcepop;
  c.clip_high = 0.28;
  c.weight_decay = 0.1;
  c.use_distributed_optimizer = true;
  c.number_of_minibatches = 4;
  c.weight_broadcast_bucket_mb = 8;
  c.weight_broadcast_free_grad_buffers = true;
  auto o = trainer_options_from_config(c, [](int64_t s) { return 1e-3 * static_cast<double>(s); });
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->loss.algorithm, trainer::Algorithm::kDrGrpo);
  EXPECT_EQ(o->loss.aggregation, trainer::LossAggregation::kTokenMean);
  EXPECT_EQ(o->loss.ppo_clip_ref, ClipReference::kBatch);
  EXPECT_EQ(o->loss.tis_mode, trainer::TisMode::kIcepop);
  EXPECT_TRUE(o->loss.use_tis);
  EXPECT_EQ(o->loss.clip_high, 0.28);
  EXPECT_EQ(o->loss.max_tokens, c.max_tokens);
  EXPECT_EQ(o->optimizer.weight_decay, 0.1);
  EXPECT_TRUE(o->optimizer.use_distributed_optimizer);
  EXPECT_EQ(o->number_of_minibatches, 4);
  EXPECT_EQ(o->weight_broadcast_bucket_mb, 8);
  EXPECT_TRUE(o->weight_broadcast_free_grad_buffers);
  EXPECT_EQ(o->learning_rate_at(3), 3e-3);
  // The config's schedule: 10 steps x 4 minibatches = 40 optimizer steps, warmup 4, cosine to 0.1.
  c.learning_rate = 1e-3;
  c.number_of_steps = 10;
  c.lr_scheduler = LrScheduler::kCosine;
  c.warmup_steps = 4;
  c.min_lr_ratio = 0.1;
  c.loss_aggregation = rlrun::LossAggregation::kAuto;  // the algorithm's own
  auto scheduled = trainer_options_from_config(c);
  ASSERT_TRUE(scheduled.ok()) << scheduled.status().message();
  EXPECT_EQ(scheduled->loss.aggregation, trainer::LossAggregation::kAlgorithmDefault);
  EXPECT_DOUBLE_EQ(scheduled->learning_rate_at(0), 0.0);
  EXPECT_DOUBLE_EQ(scheduled->learning_rate_at(2), 0.5e-3);
  EXPECT_DOUBLE_EQ(scheduled->learning_rate_at(4), 1e-3);
  EXPECT_NEAR(scheduled->learning_rate_at(39), 1e-4, 1e-12);
  c.ppo_clip_ref_logprobs = ClipRefLogprobs::kRollout;  // TIS needs the batch reference
  EXPECT_FALSE(trainer_options_from_config(c).ok());
}

TEST(TrainerInputs, TrainResultCarriesTheMetrics) {
  StepReport report;
  report.tokens = 8;
  const TrainResult r = train_result(sample_batch(), report, 3);
  EXPECT_EQ(r.step, 7u);
  EXPECT_EQ(r.weight_version, 3u);
  EXPECT_EQ(r.metrics.at("tokens"), 8.0);
}

}  // namespace
}  // namespace rlrun::trainer
