#include "trainer/lr_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace rlrun::trainer {
namespace {

using ::testing::HasSubstr;

LrScheduleConfig schedule(LrScheduleKind kind, int64_t warmup, double min_ratio) {
  return LrScheduleConfig{kind, warmup, min_ratio};
}

TEST(LrSchedule, HandComputedCosine) {
  const auto c = schedule(LrScheduleKind::kCosine, 0, 0.0);
  // 11 steps: p = step / 10
  EXPECT_DOUBLE_EQ(learning_rate(0, 11, 2.0, c), 2.0);
  EXPECT_NEAR(learning_rate(5, 11, 2.0, c), 1.0, 1e-15);  // half way: cos(pi/2) = 0
  EXPECT_NEAR(learning_rate(10, 11, 2.0, c), 0.0, 1e-15);  // the final step
  EXPECT_NEAR(learning_rate(2, 11, 2.0, c), 2.0 * 0.5 * (1 + std::cos(0.2 * std::numbers::pi)), 1e-15);
  const auto floor = schedule(LrScheduleKind::kCosine, 0, 0.1);
  EXPECT_NEAR(learning_rate(5, 11, 1.0, floor), 0.55, 1e-15);
  EXPECT_NEAR(learning_rate(10, 11, 1.0, floor), 0.1, 1e-15);
  EXPECT_NEAR(learning_rate(50, 11, 1.0, floor), 0.1, 1e-15);  // past the end: stays at the floor
}

TEST(LrSchedule, HandComputedWarmupAndLinear) {
  const auto c = schedule(LrScheduleKind::kLinear, 4, 0.0);
  // warmup 4 over 14 steps: 0, 1/4, 2/4, 3/4, then decay over steps 4..13 (9 intervals)
  EXPECT_DOUBLE_EQ(learning_rate(0, 14, 1.0, c), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(1, 14, 1.0, c), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(3, 14, 1.0, c), 0.75);
  EXPECT_DOUBLE_EQ(learning_rate(4, 14, 1.0, c), 1.0);
  EXPECT_NEAR(learning_rate(7, 14, 1.0, c), 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(learning_rate(13, 14, 1.0, c), 0.0, 1e-15);
  const auto floor = schedule(LrScheduleKind::kLinear, 4, 0.25);
  EXPECT_NEAR(learning_rate(7, 14, 1.0, floor), 0.25 + 0.75 * 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(learning_rate(13, 14, 1.0, floor), 0.25, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(2, 14, 1.0, floor), 0.5);  // warmup starts from 0, not the floor
}

TEST(LrSchedule, ConstantAndNone) {
  const auto constant = schedule(LrScheduleKind::kConstant, 2, 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(0, 10, 3.0, constant), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(1, 10, 3.0, constant), 1.5);
  EXPECT_DOUBLE_EQ(learning_rate(2, 10, 3.0, constant), 3.0);
  EXPECT_DOUBLE_EQ(learning_rate(9, 10, 3.0, constant), 3.0);  // min_lr_ratio does not apply
  const auto none = schedule(LrScheduleKind::kNone, 5, 0.5);
  for (int64_t s : {0, 3, 9, 100}) EXPECT_DOUBLE_EQ(learning_rate(s, 10, 3.0, none), 3.0);
}

TEST(LrSchedule, DegenerateInputsStayFinite) {
  const auto c = schedule(LrScheduleKind::kCosine, 0, 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(0, 1, 1.0, c), 1.0);  // a one-step run: no decay interval
  EXPECT_DOUBLE_EQ(learning_rate(0, 0, 1.0, c), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(-3, 10, 1.0, c), 1.0);
  const auto long_warmup = schedule(LrScheduleKind::kCosine, 20, 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(9, 10, 1.0, long_warmup), 0.45);  // still warming up at the end
}

// HF transformers' schedules (optimization.py), written out independently of the code under test.
double hf_cosine_factor(int64_t step, int64_t warmup, int64_t total) {
  if (step < warmup) return static_cast<double>(step) / std::max<int64_t>(1, warmup);
  const double progress = static_cast<double>(step - warmup) / std::max<int64_t>(1, total - warmup);
  return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * 0.5 * 2.0 * progress)));
}
double hf_linear_factor(int64_t step, int64_t warmup, int64_t total) {
  if (step < warmup) return static_cast<double>(step) / std::max<int64_t>(1, warmup);
  return std::max(0.0, static_cast<double>(total - step) / std::max<int64_t>(1, total - warmup));
}

// With min_lr_ratio = 0, our schedule over T steps is HF's with num_training_steps = T - 1, so
// that the last step taken (T - 1) is the one at the minimum (see lr_schedule.h).
TEST(LrSchedule, MatchesHfFormulaShiftedByOneStep) {
  for (int64_t total : {2, 7, 50, 1000}) {
    for (int64_t warmup : {int64_t{0}, int64_t{1}, total / 10, total / 3}) {
      if (warmup >= total - 1) continue;
      for (int64_t s = 0; s < total; ++s) {
        EXPECT_NEAR(learning_rate(s, total, 1.0, schedule(LrScheduleKind::kCosine, warmup, 0.0)),
                    hf_cosine_factor(s, warmup, total - 1), 1e-12)
            << "cosine step " << s << " of " << total << " warmup " << warmup;
        EXPECT_NEAR(learning_rate(s, total, 1.0, schedule(LrScheduleKind::kLinear, warmup, 0.0)),
                    hf_linear_factor(s, warmup, total - 1), 1e-12)
            << "linear step " << s << " of " << total << " warmup " << warmup;
      }
      // min_lr_ratio: HF's get_cosine_with_min_lr_schedule_with_warmup form, factor * (1 - r) + r
      for (int64_t s = warmup; s < total; ++s) {
        EXPECT_NEAR(learning_rate(s, total, 2.0, schedule(LrScheduleKind::kCosine, warmup, 0.2)),
                    2.0 * (hf_cosine_factor(s, warmup, total - 1) * 0.8 + 0.2), 1e-12);
      }
    }
  }
}

TEST(LrSchedule, ParsingAndValidation) {
  EXPECT_EQ(*parse_lr_schedule_kind("cosine"), LrScheduleKind::kCosine);
  EXPECT_EQ(*parse_lr_schedule_kind("none"), LrScheduleKind::kNone);
  EXPECT_THAT(parse_lr_schedule_kind("cosin").status().message(), HasSubstr("`cosin`"));
  EXPECT_TRUE(validate_lr_schedule(schedule(LrScheduleKind::kLinear, 10, 0.1)).ok());
  EXPECT_THAT(validate_lr_schedule(schedule(LrScheduleKind::kLinear, -1, 0.1)).message(), HasSubstr("`warmup_steps`"));
  EXPECT_THAT(validate_lr_schedule(schedule(LrScheduleKind::kLinear, 0, 1.5)).message(), HasSubstr("`min_lr_ratio`"));
  EXPECT_FALSE(validate_lr_schedule(schedule(LrScheduleKind::kLinear, 0, std::nan(""))).ok());
}

}  // namespace
}  // namespace rlrun::trainer
