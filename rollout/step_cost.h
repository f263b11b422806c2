// step_cost.h - what one engine step of a rollout worker costs, measured while it runs, for the
// loop simulator (`rlrun tune`, orchestrator/tune/).
//
// Model (least squares over every step the worker ran):
//   seconds = fixed + per_sequence * decoding + per_prefill_token * prefill + per_context_token * context
// decoding: sequences given one token; prefill: tokens (re)computed for admitted sequences;
// context: tokens already in the KV cache of the decoding sequences (what attention reads).
// Both the process's CPU time and the wall time of each step are fitted: on a CPU node processes
// share cores, so CPU time is the work and wall time depends on the neighbours; on a device the
// wall time is the work. A step's CPU time is all the worker process used since the previous step
// but its weight loads (receiving requests, sending results, the I/O thread), so the fit carries
// the worker's whole cost of generating.
//
// StepCostSums holds the fit's sufficient statistics (X^T X, X^T y), cumulative over the worker's
// life: the latest heartbeat carries everything measured so far (a lost one loses nothing), and
// the sums of several workers add up to one fit.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace rlrun::rollout {

struct StepShape {
  int64_t decoding = 0;
  int64_t prefill_tokens = 0;
  int64_t context_tokens = 0;
};

struct StepCost {
  double fixed = 0, per_sequence = 0, per_prefill_token = 0, per_context_token = 0;  // seconds
  double seconds(const StepShape& s) const {
    return fixed + per_sequence * static_cast<double>(s.decoding) +
           per_prefill_token * static_cast<double>(s.prefill_tokens) +
           per_context_token * static_cast<double>(s.context_tokens);
  }
};

class StepCostSums {
 public:
  static constexpr int kFeatures = 4;                                      // 1, decoding, prefill, context
  static constexpr int kPairs = kFeatures * (kFeatures + 1) / 2;           // upper triangle of X^T X
  static constexpr size_t kFlatSize = kPairs + 2 * kFeatures;              // wire layout (flat())

  void add(const StepShape& shape, double cpu_seconds, double wall_seconds);
  StepCostSums& operator+=(const StepCostSums& other);
  double steps() const { return xx_[0]; }

  // Layout: X^T X upper triangle row by row, then X^T y for CPU seconds, then for wall seconds.
  std::vector<double> flat() const;
  // invalid_argument unless `flat` has kFlatSize finite values with a non-negative step count.
  static Result<StepCostSums> from_flat(std::span<const double> flat);

  // The fit of CPU (use_cpu) or wall seconds. Coefficients are never negative: a feature whose
  // coefficient comes out negative (noise, or a feature that never varied) is dropped and the rest
  // refitted. With no steps, all zero.
  StepCost fit(bool use_cpu) const;

 private:
  std::array<double, kPairs> xx_{};
  std::array<double, kFeatures> xy_cpu_{}, xy_wall_{};
};

}  // namespace rlrun::rollout
