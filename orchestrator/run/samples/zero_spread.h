// run/samples/zero_spread.h - groups whose samples all earned the same reward
// (discard_group_zero_advantage): they teach nothing and are discarded, within a bound.
//
// Rules, with R = max_zero_spread_rounds and B = prompts_batch_size_for_trainer:
//  - Every complete group's rewards are counted (how often the policy succeeds, trained or not).
//  - A group with no reward spread is discarded while the step waiting for its batch has discarded
//    fewer than R * B of them. Past that bound the step stops waiting for better groups: such
//    groups fill its batch (advantage 0, counted as kept) until batch_taken().
//  - Past the bound, with no scored group waiting, when every group discarded earned nothing and no
//    sample of the run ever earned a reward, the policy cannot learn: kStop, and stop_reason()
//    says why no batch can form and what to do.
//  - R = 0 waits without bound, warning (once a minute) past 10 batches' worth.
//  - A reward collapse is suspected when the groups past the bound all earned nothing after at
//    least kRewardedStepsBefore rewarded steps with at least kSuccessRateBefore of the samples
//    rewarded: the first such step is recorded (stats) and its warning is never held back.
// Nothing here sends or waits; the warnings go to the log. Threads: the orchestrator's loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

struct ZeroSpreadOptions {
  bool discard = true;        // discard_group_zero_advantage
  int64_t max_rounds = 0;     // max_zero_spread_rounds, in batches (0: no bound)
  int64_t batch_groups = 1;   // prompts_batch_size_for_trainer
  uint32_t group_size = 1;
  double kl_coef = 0, learning_rate = 0;  // named by the advice on a collapse
};

class ZeroSpreadPolicy {
 public:
  // A policy that rarely succeeds yet (the quickstart's first steps: about 1 sample in 100 earns
  // a reward, and droughts of 80 groups are common) is not suspected of a collapse.
  static constexpr int64_t kRewardedStepsBefore = 10;
  static constexpr double kSuccessRateBefore = 0.1;

  // The run as a group comes back: the step waiting for its batch (1-based), whether scored groups
  // wait for a batch, and the mean reward of every completed step.
  struct Run {
    int64_t step = 1;
    bool groups_waiting = false;
    const std::vector<double>& step_reward_means;
  };
  enum class Verdict {
    kTrain,    // advantages as usual (a spread, or past the bound, or discarding is off)
    kDiscard,  // counted as zero_advantage
    kStop,     // discarded too, and no batch can form: stop_reason()
  };
  struct Stats {
    int64_t kept = 0;                  // groups with no spread trained past the bound
    int64_t reward_collapse_step = 0;  // the first step that suspected a collapse (0: none)
  };

  explicit ZeroSpreadPolicy(ZeroSpreadOptions options) : options_(options) {}

  Verdict on_group(const std::vector<float>& rewards, const Run& run);
  void batch_taken();  // the next step's wait starts afresh
  const std::string& stop_reason() const { return stop_reason_; }
  // What the warning past the bound advises, from the groups it waited on. Changes nothing.
  std::string advice(const Run& run) const;
  const Stats& stats() const { return stats_; }

 private:
  struct Rates {
    int64_t rewarded_steps = 0;
    double success_rate = 0;  // of the samples scored before this window
  };
  Rates rates(const Run& run) const;
  bool collapse_suspected(const Run& run) const;
  Verdict past_bound(const Run& run);

  ZeroSpreadOptions options_;
  // Groups discarded while the current step waits; failed: every sample earned 0; solved: 1.
  int64_t discarded_ = 0, failed_ = 0, solved_ = 0;
  bool keep_ = false;  // past the bound: zero-spread groups fill the step's batch
  // Some sample of this run earned a reward: a long streak without one is then bad luck on a
  // policy that rarely succeeds, and the step trains on what there is rather than stop the run.
  bool rewarded_once_ = false;
  int64_t samples_scored_ = 0, samples_rewarded_ = 0;
  std::string stop_reason_;
  Stats stats_;
  log::RateLimited log_{std::chrono::seconds(60)};
};

}  // namespace rlrun::orchestrator
