// lr_schedule.h - the learning rate of each optimizer step: warmup, then constant/linear/cosine.
//
// `step` is the 0-based index of the optimizer step about to be taken; a run takes steps
// 0 .. total_steps-1. Pure functions: the trainer asks for the rate of every step, a resumed run
// gets the same rates by passing the same step.
//
//   none      base_lr on every step (warmup_steps and min_lr_ratio are ignored)
//   constant  warmup, then base_lr
//   linear    warmup, then straight down to base_lr * min_lr_ratio at the final step
//   cosine    warmup, then half a cosine down to base_lr * min_lr_ratio at the final step
//
// Warmup is HF's: lr = base_lr * step / warmup_steps for step < warmup_steps, so step 0 runs at
// 0 (the optimizer state still gets its first moments). After warmup, with
// p = (step - warmup_steps) / (total_steps - 1 - warmup_steps) clamped to [0, 1] and
// r = min_lr_ratio: linear = r + (1 - r)(1 - p), cosine = r + (1 - r) * 0.5 * (1 + cos(pi p)).
// Intended difference from HF get_{linear,cosine}_schedule_with_warmup(num_training_steps=T):
// HF reaches its minimum at step T, one past the last step taken, so its last step still runs at
// base_lr/(T - warmup) (linear); here the last step taken (T - 1) runs at exactly
// base_lr * min_lr_ratio. With min_lr_ratio = 0 this equals HF with num_training_steps = T - 1.
// min_lr_ratio follows HF's get_cosine_with_min_lr_schedule_with_warmup (factor * (1-r) + r).
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace rlrun::trainer {

enum class LrScheduleKind { kNone, kConstant, kLinear, kCosine };

struct LrScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;   // >= 0
  double min_lr_ratio = 0.0;  // in [0, 1]: final rate as a fraction of base_lr (linear, cosine)
};

// "none", "constant", "linear", "cosine".
Result<LrScheduleKind> parse_lr_schedule_kind(std::string_view name);
const char* lr_schedule_kind_name(LrScheduleKind kind);

// invalid_argument naming `warmup_steps` / `min_lr_ratio` when out of range.
Status validate_lr_schedule(const LrScheduleConfig& config);

// The rate for `step` (see above). Steps past the end keep the final rate; negative steps count
// as 0. total_steps < 1 is treated as 1.
double learning_rate(int64_t step, int64_t total_steps, double base_lr, const LrScheduleConfig& config);

}  // namespace rlrun::trainer
