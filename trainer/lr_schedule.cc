#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/observe/log.h"

namespace rlrun::trainer {

Result<LrScheduleKind> parse_lr_schedule_kind(std::string_view name) {
  for (LrScheduleKind k : {LrScheduleKind::kNone, LrScheduleKind::kConstant, LrScheduleKind::kLinear,
                           LrScheduleKind::kCosine}) {
    if (name == lr_schedule_kind_name(k)) return k;
  }
  return invalid_argument(str("unknown learning-rate schedule `", name, "` (none, constant, linear or cosine)"));
}

const char* lr_schedule_kind_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kNone: return "none";
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kLinear: return "linear";
    case LrScheduleKind::kCosine: return "cosine";
  }
  return "?";
}

Status validate_lr_schedule(const LrScheduleConfig& config) {
  if (config.warmup_steps < 0) {
    return invalid_argument(str("`warmup_steps` = ", config.warmup_steps, " must be >= 0"));
  }
  if (!(config.min_lr_ratio >= 0.0 && config.min_lr_ratio <= 1.0)) {
    return invalid_argument(str("`min_lr_ratio` = ", config.min_lr_ratio, " must be in [0, 1]"));
  }
  return Status();
}

double learning_rate(int64_t step, int64_t total_steps, double base_lr, const LrScheduleConfig& config) {
  if (config.kind == LrScheduleKind::kNone) return base_lr;
  step = std::max<int64_t>(step, 0);
  total_steps = std::max<int64_t>(total_steps, 1);
  const int64_t warmup = std::max<int64_t>(config.warmup_steps, 0);
  if (step < warmup) return base_lr * static_cast<double>(step) / static_cast<double>(warmup);
  if (config.kind == LrScheduleKind::kConstant) return base_lr;

  const int64_t decay_steps = std::max<int64_t>(total_steps - 1 - warmup, 1);
  const double p = std::clamp(static_cast<double>(step - warmup) / static_cast<double>(decay_steps), 0.0, 1.0);
  const double factor = config.kind == LrScheduleKind::kLinear ? 1.0 - p
                                                                : 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  const double r = config.min_lr_ratio;
  return base_lr * (r + (1.0 - r) * factor);
}

}  // namespace rlrun::trainer
