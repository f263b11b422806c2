// core_balance.h - the cores go where the work is (balance_cpu_threads). With the CPU backend and
// cpu_threads_per_worker: 0, every process starts with its share of the node's cores. When one
// side is the loop's bottleneck (the trainer never waits for a batch, or the rollout workers always
// generate) while the other idles, the idle side's cores are lent to the busy one: its processes
// take more compute threads between two steps (SetThreads). They are given back when the borrower
// starts to wait or the lender gets busy. Only processes that share a node can lend: the
// orchestrator balances a run whose workers all share one node.
//
// Measured over windows of at least kWindowSteps steps and kWindowSeconds of loop time: the
// trainer's idle fraction (waiting for a batch: its cores are free then) and the rollout workers'
// (no generation lane in use), less the CPU they spent scoring the KL reference meanwhile. Each
// change starts a new window, measured with the new threads.
//
// Rules, per window:
//  - nothing lent: the trainer borrows when its idle fraction is at most kBottleneckIdle and the
//    rollout workers' idle cores per trainer rank are at least kLendAt; each rank takes
//    floor(spare + 1 - kLendAt) more threads. The other way round for the rollout workers.
//  - the window after a lend is its trial: unless the steps got at least kMinGain faster, the
//    threads go back (a process whose extra threads share cores with a busy neighbour can be slower
//    than with its own share: BLAS splits its work evenly and waits for the slowest thread), and no
//    lend in that direction is tried for kRetryWindows windows (the other way stays open: a loop
//    whose bottleneck moves, as the quickstart's does once most groups carry a reward, is
//    balanced the other way at once).
//  - lent: given back when the borrower idles more than kReturnIdle, or when the lender's idle
//    cores per borrower fall below kReturnBelow (the lender is busy now: both may be slowed) and
//    the steps are no longer kMinGain faster than before the lend. A lender that is busy while the
//    steps stay faster is the balance sought (issue 21's SmolLM2 loop: the rollout worker shares
//    its core and the trainer still never waits).
// The gap between kLendAt and kReturnBelow keeps a borderline loop from flipping every window.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rlrun::orchestrator {

struct CoreShare {
  int trainer_threads = 1;  // per trainer rank
  int rollout_threads = 1;  // per rollout worker
  bool operator==(const CoreShare&) const = default;
};

// One window's measures: mean idle fractions in [0, 1] (the rollout's already less its scoring)
// and the loop's wall seconds per step.
struct WindowLoad {
  double trainer_idle = 0;
  double rollout_idle = 0;
  double seconds_per_step = 0;
};

// The loop's running totals at the end of a step; a window's load is the difference of two.
struct LoopTotals {
  int64_t step = 0;
  double loop_seconds = 0;
  double trainer_idle_seconds = 0;
  double rollout_idle_seconds = 0;     // summed over the rollout workers
  double rollout_scoring_cpu = 0;      // CPU seconds the rollout workers spent scoring the KL reference
};

// Cuts the loop into windows of at least kWindowSteps steps and kWindowSeconds of loop time,
// starting after the loop's first step (its wait is the first batch's generation, which no share
// of threads changes). Used by the run (run/workers/cores.cc) and by rlrun tune's simulation alike.
class LoadWindows {
 public:
  // Called at the end of every step with the loop's totals: the load of the window that ends
  // here, or nothing. rollout_threads: each rollout worker's threads in the window (a change of
  // threads ends a window, so one value holds for all of it); its KL scoring, done while no lane
  // is in use, is taken out of its idle time.
  std::optional<WindowLoad> at_step_end(const LoopTotals& now, int rollout_workers, int rollout_threads);

 private:
  std::optional<LoopTotals> start_;
};

class CoreBalance {
 public:
  static constexpr int64_t kWindowSteps = 2;
  static constexpr double kWindowSeconds = 1.0;
  static constexpr double kBottleneckIdle = 0.10;
  static constexpr double kLendAt = 0.35;
  static constexpr double kReturnIdle = 0.25;
  static constexpr double kReturnBelow = 0.15;
  static constexpr double kMinGain = 0.03;
  static constexpr int kRetryWindows = 20;

  // base: each side's threads per process as launched.
  CoreBalance(CoreShare base, int trainer_ranks, int rollout_workers);

  // The window's measures; a decision worth logging (with why): the new threads when they change,
  // or the same ones when a trial paid.
  struct Change {
    CoreShare share;
    std::string reason;
  };
  std::optional<Change> observe(const WindowLoad& load);

  const CoreShare& base() const { return base_; }
  const CoreShare& current() const { return current_; }

 private:
  double spare_for(const WindowLoad& load, bool to_trainer) const;
  std::optional<Change> lend(const WindowLoad& load);
  std::optional<Change> judge_trial(const WindowLoad& load);
  std::optional<Change> keep_or_return(const WindowLoad& load);

  enum class State { kBase, kTrial, kLent };
  CoreShare base_, current_;
  int trainer_ranks_, rollout_workers_;
  State state_ = State::kBase;
  double before_seconds_per_step_ = 0;  // the window that decided the lend
  int cooldown_[2] = {0, 0};            // windows before a lend may be tried again: [to the trainer, to the rollouts]
};

}  // namespace rlrun::orchestrator
