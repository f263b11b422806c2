// run/matmul_speed.h - whether the trainer's matrix products run at this host's speed, and when
// they do not, the likely cause, for the user (issue: a fallback GEMM kernel cost two thirds of
// the speed, and nothing said so).
//
// Each RL step's rank-0 metrics carry what the step's products did ("matmul_gflops",
// "matmul_mean_mflops": orchestrator/roles/trainer_process.cc) beside what one thread of the host
// measured at start ("host_sgemm_gflops", "host_widest_kernels") and the step's CPU use
// ("cpu_seconds", "cpu_threads", "seconds_*"). The watch keeps the medians of the steps so far.
//
// Rules:
//  - The products are slow when their median speed is below kSlowFraction of the host's one-thread
//    sgemm times the threads, and only judged when they are large (a median of kLargeMflops per
//    product or more: small ones never reach a kernel's speed, whatever the host).
//  - The cause, first that applies: the GEMM runs kernels older than the CPU supports (a fallback
//    kernel); the node runs more compute threads than it has cores (oversubscribed); the step's
//    threads got much less CPU than their wall time (a core taken by another process or lent away
//    by the hypervisor); else unknown.
//  - Nothing is judged before kMinSteps steps: the first ones warm caches and allocators.
// Not thread-safe: the orchestrator's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rlrun::orchestrator {

class MatmulSpeedWatch {
 public:
  static constexpr double kSlowFraction = 0.5;
  static constexpr double kLargeMflops = 20;
  static constexpr int kMinSteps = 3;
  static constexpr double kBusyFraction = 0.7;  // CPU seconds / (threads x wall) below this: cores taken

  // What the run's processes are given on the trainer's node.
  struct Placement {
    int64_t compute_threads_on_node = 0;  // every worker process's compute threads there
    int64_t cores_on_node = 0;
  };

  // One RL step's rank-0 metrics; a step without the matmul figures (a CUDA trainer) is skipped.
  void on_step(const std::map<std::string, double>& rank0);

  struct Verdict {
    double gflops = 0;           // the products' median speed
    double expected_gflops = 0;  // host one-thread sgemm x threads
    int64_t threads = 0;
    std::string cause;           // empty when the products are not slow
  };
  // Empty until kMinSteps steps with figures, or when the products are small.
  std::optional<Verdict> verdict(const Placement& placement) const;
  // The line for the log: empty when there is nothing to say.
  std::string advice(const Placement& placement) const;
  // For profile.json and summary.json: the medians and the verdict (null when none).
  nlohmann::ordered_json to_json(const Placement& placement) const;

 private:
  struct Step {
    double gflops, mean_mflops, host_sgemm_gflops, threads, busy_fraction;
    bool widest_kernels;
  };
  std::vector<Step> steps_;
};

}  // namespace rlrun::orchestrator
