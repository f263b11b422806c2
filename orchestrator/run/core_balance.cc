#include "orchestrator/run/core_balance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {

int percent(double fraction) { return static_cast<int>(std::lround(100 * fraction)); }

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", s);
  return text;
}

// Threads each borrowing process takes for `spare` idle cores per borrower (>= kLendAt: at least 1).
int lent_threads(double spare) { return static_cast<int>(std::floor(spare + 1 - CoreBalance::kLendAt + 1e-9)); }

}  // namespace

CoreBalance::CoreBalance(CoreShare base, int trainer_ranks, int rollout_workers)
    : base_(base), current_(base), trainer_ranks_(std::max(1, trainer_ranks)),
      rollout_workers_(std::max(1, rollout_workers)) {}

std::optional<CoreBalance::Change> CoreBalance::lend(const WindowLoad& load) {
  // Idle cores of each side, per process of the other.
  const double rollout_spare = load.rollout_idle * rollout_workers_ * base_.rollout_threads / trainer_ranks_;
  const double trainer_spare = load.trainer_idle * trainer_ranks_ * base_.trainer_threads / rollout_workers_;
  if (load.trainer_idle <= kBottleneckIdle && rollout_spare >= kLendAt) {
    const int extra = lent_threads(rollout_spare);
    CoreShare share = base_;
    share.trainer_threads += extra;
    return Change{share, str("the trainer idled ", percent(load.trainer_idle), "% and the rollout workers ",
                             percent(load.rollout_idle), "% of the last steps: each trainer rank takes ",
                             share.trainer_threads, " threads")};
  }
  if (load.rollout_idle <= kBottleneckIdle && trainer_spare >= kLendAt) {
    const int extra = lent_threads(trainer_spare);
    CoreShare share = base_;
    share.rollout_threads += extra;
    return Change{share, str("the rollout workers idled ", percent(load.rollout_idle), "% and the trainer ",
                             percent(load.trainer_idle), "% of the last steps: each rollout worker takes ",
                             share.rollout_threads, " threads")};
  }
  return std::nullopt;
}

std::optional<CoreBalance::Change> CoreBalance::observe(const WindowLoad& load) {
  switch (state_) {
    case State::kBase: {
      if (cooldown_ > 0) {
        --cooldown_;
        return std::nullopt;
      }
      std::optional<Change> change = lend(load);
      if (!change) return std::nullopt;
      current_ = change->share;
      state_ = State::kTrial;
      before_seconds_per_step_ = load.seconds_per_step;
      return change;
    }
    case State::kTrial: return judge_trial(load);
    case State::kLent: return keep_or_return(load);
  }
  return std::nullopt;
}

std::optional<CoreBalance::Change> CoreBalance::judge_trial(const WindowLoad& load) {
  const bool to_trainer = current_.trainer_threads > base_.trainer_threads;
  const char* borrower = to_trainer ? "trainer" : "rollout workers";
  const std::string figures = str(seconds(load.seconds_per_step), " s/step with the borrowed threads, ",
                                  seconds(before_seconds_per_step_), " before");
  if (load.seconds_per_step < before_seconds_per_step_ * (1 - kMinGain)) {
    state_ = State::kLent;
    return Change{current_, str("lending pays (", figures, "): the ", borrower, " keep", to_trainer ? "s" : "",
                                " the borrowed threads")};
  }
  current_ = base_;
  state_ = State::kBase;
  cooldown_ = kRetryWindows;
  return Change{base_, str("lending did not pay (", figures, "): the ", borrower, " give", to_trainer ? "s" : "",
                           " the borrowed threads back; tried again after ", kRetryWindows, " windows")};
}

std::optional<CoreBalance::Change> CoreBalance::keep_or_return(const WindowLoad& load) {
  const bool to_trainer = current_.trainer_threads > base_.trainer_threads;
  const double borrower_idle = to_trainer ? load.trainer_idle : load.rollout_idle;
  const double lender_spare = to_trainer
      ? load.rollout_idle * rollout_workers_ * base_.rollout_threads / trainer_ranks_
      : load.trainer_idle * trainer_ranks_ * base_.trainer_threads / rollout_workers_;
  const char* borrower = to_trainer ? "trainer" : "rollout workers";
  const char* lender = to_trainer ? "rollout workers" : "trainer";
  std::string why;
  if (borrower_idle > kReturnIdle)
    why = str("the ", borrower, " idled ", percent(borrower_idle), "% of the last steps");
  else if (lender_spare < kReturnBelow)
    why = str("the ", lender, " idled only ", percent(to_trainer ? load.rollout_idle : load.trainer_idle),
              "% of the last steps");
  if (why.empty()) return std::nullopt;
  current_ = base_;
  state_ = State::kBase;
  return Change{base_, str(why, ": the ", borrower, " give", to_trainer ? "s" : "", " the borrowed threads back (",
                           base_.trainer_threads, " thread(s) per trainer rank, ", base_.rollout_threads,
                           " per rollout worker)")};
}

}  // namespace rlrun::orchestrator
