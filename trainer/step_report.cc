// StepReport::metrics(): the flat metric names a trainer step reports (train_step.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "trainer/train_step.h"

namespace rlrun::trainer {

std::map<std::string, double> StepReport::metrics() const {
  std::map<std::string, double> m;
  PolicyLossResult all;
  double loss = 0, grad_norm = 0, grad_norm_max = 0, clip_coef_min = 1, lr = 0;
  int64_t steps = 0, skipped = 0;
  for (const MinibatchReport& mb : minibatches) {
    if (mb.skipped_no_tokens) {
      ++skipped;
      continue;
    }
    all.pg_loss += mb.loss.pg_loss, all.kl_loss += mb.loss.kl_loss, all.entropy_loss += mb.loss.entropy_loss;
    all.stats.merge(mb.loss.stats);
    loss += mb.loss.loss;
    grad_norm += mb.optimizer.grad_norm;
    grad_norm_max = std::max(grad_norm_max, mb.optimizer.grad_norm);
    clip_coef_min = std::min(clip_coef_min, mb.optimizer.clip_coef);
    lr = mb.optimizer.learning_rate;
    if (!mb.optimizer.skipped) ++steps;
  }
  const double n = std::max<int64_t>(1, static_cast<int64_t>(minibatches.size()) - skipped);
  const PolicyLossStats& s = all.stats;
  auto finite_or_zero = [](double x) { return std::isfinite(x) ? x : 0.0; };
  m["loss"] = loss / n;
  m["pg_loss"] = all.pg_loss / n;
  m["kl_loss"] = all.kl_loss / n;
  m["entropy_loss"] = all.entropy_loss / n;
  m["clip_low_fraction"] = s.clip_low_fraction();
  m["clip_high_fraction"] = s.clip_high_fraction();
  m["dual_clip_fraction"] = s.dual_clip_fraction();
  m["tis_truncated_fraction"] = s.tis_truncated_fraction();
  m["ratio_mean"] = s.ratio_mean();
  m["ratio_min"] = finite_or_zero(s.ratio_min);
  m["ratio_max"] = finite_or_zero(s.ratio_max);
  m["tis_weight_mean"] = s.tis_weight_mean();
  m["tis_weight_min"] = finite_or_zero(s.tis_weight_min);
  m["tis_weight_max"] = finite_or_zero(s.tis_weight_max);
  m["approx_kl"] = s.approx_kl();
  m["ref_kl"] = s.ref_kl();
  m["entropy"] = s.entropy_mean();
  m["grad_norm"] = grad_norm / n;
  m["grad_norm_max"] = grad_norm_max;
  m["clip_coef_min"] = clip_coef_min;
  m["learning_rate"] = lr;
  m["optimizer_steps"] = static_cast<double>(steps);
  m["skipped_minibatches"] = static_cast<double>(skipped);
  m["tokens"] = static_cast<double>(tokens);
  m["trained_tokens"] = static_cast<double>(trained_tokens);
  m["seconds_recompute"] = seconds_recompute;
  m["seconds_reference"] = seconds_reference;
  m["reference_tokens"] = static_cast<double>(reference_tokens);
  m["seconds_forward_backward"] = seconds_forward_backward;
  m["seconds_optimizer"] = seconds_optimizer;
  m["memory_forward_backward_backend_peak_bytes"] = static_cast<double>(memory_forward_backward.backend_peak_bytes);
  m["memory_optimizer_backend_peak_bytes"] = static_cast<double>(memory_optimizer.backend_peak_bytes);
  m["memory_forward_backward_rss_peak_bytes"] = static_cast<double>(memory_forward_backward.rss_peak_bytes);
  m["memory_optimizer_rss_peak_bytes"] = static_cast<double>(memory_optimizer.rss_peak_bytes);
  return m;
}

}  // namespace rlrun::trainer
