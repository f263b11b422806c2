#include "orchestrator/run/samples/zero_spread.h"

#include <algorithm>
#include <cmath>

#include "trainer/advantages.h"

namespace rlrun::orchestrator {

ZeroSpreadPolicy::Verdict ZeroSpreadPolicy::on_group(const std::vector<float>& rewards, const Run& run) {
  const auto rewarded = [](float r) { return r > 0.0f; };
  rewarded_once_ = rewarded_once_ || std::any_of(rewards.begin(), rewards.end(), rewarded);
  samples_scored_ += static_cast<int64_t>(rewards.size());
  samples_rewarded_ += std::count_if(rewards.begin(), rewards.end(), rewarded);
  if (!options_.discard || !trainer::group_has_zero_spread(rewards)) return Verdict::kTrain;
  if (keep_) {
    ++stats_.kept;  // past max_zero_spread_rounds: it fills the waiting step's batch
    return Verdict::kTrain;
  }
  ++discarded_;
  failed_ += rewards[0] <= 0.0f;
  solved_ += rewards[0] >= 1.0f;
  const int64_t batch = options_.batch_groups;
  const int64_t bound = options_.max_rounds * batch;
  if (bound == 0) {  // waiting without bound, as asked: still say why no batch forms
    if (discarded_ >= 10 * batch)
      log_.write(log::Level::kWarn, str("step ", run.step, ": ", discarded_, " groups in a row had no reward spread and ",
                                        "were discarded (", solved_, " solved by every sample); ",
                                        "max_zero_spread_rounds = 0 waits without bound"));
    return Verdict::kDiscard;
  }
  if (discarded_ < bound) return Verdict::kDiscard;
  return past_bound(run);
}

ZeroSpreadPolicy::Verdict ZeroSpreadPolicy::past_bound(const Run& run) {
  // A policy that never (or always) solves the task gives no group a reward spread: past the bound
  // the step stops waiting, and the log says which case it is. One that has never earned anything
  // in this run cannot learn: the run stops.
  if (!run.groups_waiting && failed_ == discarded_ && !rewarded_once_) {
    stop_reason_ = str(discarded_, " groups in a row earned no reward and were discarded for no reward ",
                       "spread (discard_group_zero_advantage; max_zero_spread_rounds = ", options_.max_rounds,
                       " batches), so no batch can form: the policy never succeeds. ",
                       "Start from a model that solves some prompts (more format_warm_start_steps, a pretrained ",
                       "model.checkpoint), make the task easier, or set discard_group_zero_advantage: false");
    return Verdict::kStop;
  }
  keep_ = true;
  const std::string message =
      str("step ", run.step, ": ", discarded_, " groups had no reward spread (", solved_,
          " solved by every sample), more than max_zero_spread_rounds = ", options_.max_rounds,
          " batches: the step fills its batch with such groups (advantage 0) instead of waiting. ", advice(run));
  if (collapse_suspected(run) && stats_.reward_collapse_step == 0) {
    stats_.reward_collapse_step = run.step;
    log::warn(message);  // the first sign of a collapse is never held back
  } else {
    log_.write(log::Level::kWarn, message);
  }
  return Verdict::kDiscard;
}

void ZeroSpreadPolicy::batch_taken() {
  discarded_ = failed_ = solved_ = 0;
  keep_ = false;
}

ZeroSpreadPolicy::Rates ZeroSpreadPolicy::rates(const Run& run) const {
  Rates r;
  const std::vector<double>& means = run.step_reward_means;
  r.rewarded_steps = std::count_if(means.begin(), means.end(), [](double m) { return m > 0.0; });
  const int64_t before = samples_scored_ - discarded_ * static_cast<int64_t>(options_.group_size);
  r.success_rate = before > 0 ? static_cast<double>(samples_rewarded_) / static_cast<double>(before) : 0.0;
  return r;
}

// Every one earned nothing, in a run whose policy had been succeeding for a while: it has likely
// unlearned what it could do (GRPO pushing away from wrong answers can push it off the answer
// format too), the failure a KL pull to the reference prevents.
bool ZeroSpreadPolicy::collapse_suspected(const Run& run) const {
  if (2 * solved_ > discarded_ || failed_ < discarded_) return false;
  const Rates r = rates(run);
  return r.rewarded_steps >= kRewardedStepsBefore && r.success_rate >= kSuccessRateBefore;
}

std::string ZeroSpreadPolicy::advice(const Run& run) const {
  if (2 * solved_ > discarded_)
    return "The policy solves most prompts every time: the task is learned; stop here or make it harder";
  if (!collapse_suspected(run)) return "Few groups teach anything: consider a larger group_size or an easier task";
  const Rates r = rates(run);
  const std::vector<double>& means = run.step_reward_means;
  const auto best = std::max_element(means.begin(), means.end(), [](double a, double b) {
    return std::isnan(a) || (!std::isnan(b) && b > a);
  });
  const int64_t best_step = static_cast<int64_t>(best - means.begin()) + 1;  // one mean per completed step
  return str("None of them earned any reward, though ", static_cast<int>(100 * r.success_rate + 0.5),
             "% of the samples before did and ", r.rewarded_steps, " earlier steps trained on rewarded samples ",
             "(mean reward up to ", *best, ", step ", best_step, "): the policy may have lost what it could do ",
             "(often the answer format; the samples in samples.jsonl show it). ",
             options_.kl_coef > 0 ? str("kl_coef ", options_.kl_coef, " did not hold it near its start: raise it")
                                  : std::string("Nothing holds it near its start: set kl_coef (e.g. 0.02 to 0.1)"),
             ", or lower learning_rate (", options_.learning_rate, ")");
}

}  // namespace rlrun::orchestrator
