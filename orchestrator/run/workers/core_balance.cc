#include "orchestrator/run/workers/core_balance.h"

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

std::optional<WindowLoad> LoadWindows::at_step_end(const LoopTotals& now, int rollout_workers, int rollout_threads) {
  if (!start_) {
    start_ = now;
    return std::nullopt;
  }
  const LoopTotals& from = *start_;
  const double loop = now.loop_seconds - from.loop_seconds;
  if (now.step - from.step < CoreBalance::kWindowSteps || loop < CoreBalance::kWindowSeconds) return std::nullopt;
  const double workers = std::max(1, rollout_workers), threads = std::max(1, rollout_threads);
  const double idle = (now.rollout_idle_seconds - from.rollout_idle_seconds) / (workers * loop);
  const double scoring = (now.rollout_scoring_cpu - from.rollout_scoring_cpu) / (workers * threads * loop);
  WindowLoad load;
  load.trainer_idle = std::clamp((now.trainer_idle_seconds - from.trainer_idle_seconds) / loop, 0.0, 1.0);
  load.rollout_idle = std::clamp(idle - scoring, 0.0, 1.0);
  load.seconds_per_step = loop / static_cast<double>(now.step - from.step);
  start_ = now;
  return load;
}

CoreBalance::CoreBalance(CoreShare base, int trainer_ranks, int rollout_workers)
    : base_(base), current_(base), trainer_ranks_(std::max(1, trainer_ranks)),
      rollout_workers_(std::max(1, rollout_workers)) {}

double CoreBalance::spare_for(const WindowLoad& load, bool to_trainer) const {
  // The lenders' idle cores, per borrowing process.
  return to_trainer ? load.rollout_idle * rollout_workers_ * base_.rollout_threads / trainer_ranks_
                    : load.trainer_idle * trainer_ranks_ * base_.trainer_threads / rollout_workers_;
}

std::optional<CoreBalance::Change> CoreBalance::lend(const WindowLoad& load) {
  for (const bool to_trainer : {true, false}) {
    if (cooldown_[to_trainer ? 0 : 1] > 0) continue;
    const double borrower_idle = to_trainer ? load.trainer_idle : load.rollout_idle;
    const double spare = spare_for(load, to_trainer);
    if (borrower_idle > kBottleneckIdle || spare < kLendAt) continue;
    CoreShare share = base_;
    int& threads = to_trainer ? share.trainer_threads : share.rollout_threads;
    threads += lent_threads(spare);
    return Change{share, str("the ", to_trainer ? "trainer" : "rollout workers", " idled ", percent(borrower_idle),
                             "% and the ", to_trainer ? "rollout workers " : "trainer ",
                             percent(to_trainer ? load.rollout_idle : load.trainer_idle),
                             "% of the last steps: each ", to_trainer ? "trainer rank" : "rollout worker", " takes ",
                             threads, " threads")};
  }
  return std::nullopt;
}

std::optional<CoreBalance::Change> CoreBalance::observe(const WindowLoad& load) {
  switch (state_) {
    case State::kBase: {
      std::optional<Change> change = lend(load);
      for (int& windows : cooldown_) windows = std::max(0, windows - 1);
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
  cooldown_[to_trainer ? 0 : 1] = kRetryWindows;
  return Change{base_, str("lending did not pay (", figures, "): the ", borrower, " give", to_trainer ? "s" : "",
                           " the borrowed threads back; not lent to ", to_trainer ? "it" : "them", " again for ",
                           kRetryWindows, " windows")};
}

std::optional<CoreBalance::Change> CoreBalance::keep_or_return(const WindowLoad& load) {
  const bool to_trainer = current_.trainer_threads > base_.trainer_threads;
  const double borrower_idle = to_trainer ? load.trainer_idle : load.rollout_idle;
  const double lender_spare = spare_for(load, to_trainer);
  const char* borrower = to_trainer ? "trainer" : "rollout workers";
  const char* lender = to_trainer ? "rollout workers" : "trainer";
  std::string why;
  if (borrower_idle > kReturnIdle)
    why = str("the ", borrower, " idled ", percent(borrower_idle), "% of the last steps");
  else if (lender_spare < kReturnBelow && load.seconds_per_step >= before_seconds_per_step_ * (1 - kMinGain))
    why = str("the ", lender, " idled only ", percent(to_trainer ? load.rollout_idle : load.trainer_idle),
              "% of the last steps and the steps are no faster than before the lend (",
              seconds(load.seconds_per_step), " s/step, ", seconds(before_seconds_per_step_), " before)");
  if (why.empty()) return std::nullopt;
  current_ = base_;
  state_ = State::kBase;
  return Change{base_, str(why, ": the ", borrower, " give", to_trainer ? "s" : "", " the borrowed threads back (",
                           base_.trainer_threads, " thread(s) per trainer rank, ", base_.rollout_threads,
                           " per rollout worker)")};
}

}  // namespace rlrun::orchestrator
