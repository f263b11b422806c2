#include "orchestrator/run/matmul_speed.h"

#include <algorithm>
#include <cmath>

#include "common/observe/log.h"

namespace rlrun::orchestrator {
namespace {

double value_or(const std::map<std::string, double>& m, const char* key, double fallback) {
  const auto it = m.find(key);
  return it == m.end() || !std::isfinite(it->second) ? fallback : it->second;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

}  // namespace

void MatmulSpeedWatch::on_step(const std::map<std::string, double>& rank0) {
  const double gflops = value_or(rank0, "matmul_gflops", 0);
  const double host = value_or(rank0, "host_sgemm_gflops", 0);
  if (gflops <= 0 || host <= 0) return;
  const double threads = std::max(1.0, value_or(rank0, "cpu_threads", 1));
  double wall = 0;
  for (const char* key : {"seconds_forward_backward", "seconds_recompute", "seconds_reference", "seconds_optimizer"})
    wall += std::max(0.0, value_or(rank0, key, 0));
  const double cpu = value_or(rank0, "cpu_seconds", 0);
  // 1 when unknown: a step without its times says nothing about taken cores.
  const double busy = wall > 0 && cpu > 0 ? cpu / (threads * wall) : 1;
  steps_.push_back(Step{gflops, value_or(rank0, "matmul_mean_mflops", 0), host, threads, busy,
                        value_or(rank0, "host_widest_kernels", 1) != 0});
}

std::optional<MatmulSpeedWatch::Verdict> MatmulSpeedWatch::verdict(const Placement& placement) const {
  if (static_cast<int>(steps_.size()) < kMinSteps) return std::nullopt;
  auto med = [&](double Step::*field) {
    std::vector<double> v;
    for (const Step& s : steps_) v.push_back(s.*field);
    return median(std::move(v));
  };
  if (med(&Step::mean_mflops) < kLargeMflops) return std::nullopt;
  Verdict out;
  out.gflops = med(&Step::gflops);
  out.threads = static_cast<int64_t>(std::lround(med(&Step::threads)));
  out.expected_gflops = med(&Step::host_sgemm_gflops) * static_cast<double>(out.threads);
  if (out.gflops >= kSlowFraction * out.expected_gflops) return out;
  const bool fallback = std::any_of(steps_.begin(), steps_.end(), [](const Step& s) { return !s.widest_kernels; });
  const double busy = med(&Step::busy_fraction);
  if (fallback) {
    out.cause = "the GEMM library runs kernels older than this CPU supports (a fallback kernel; `rlrun version` "
                "names the kernels)";
  } else if (placement.cores_on_node > 0 && placement.compute_threads_on_node > placement.cores_on_node) {
    out.cause = str("the node is oversubscribed: its processes compute with ", placement.compute_threads_on_node,
                    " threads on ", placement.cores_on_node,
                    " cores (lower cpu_threads_per_worker or inference_num_workers)");
  } else if (busy < kBusyFraction) {
    out.cause = str("the trainer's threads ran only ", static_cast<int>(std::lround(100 * busy)),
                    "% of their wall time: another process on the node, or the hypervisor, takes their cores");
  } else {
    out.cause = "not known (the threads were busy and the kernels are the CPU's widest)";
  }
  return out;
}

std::string MatmulSpeedWatch::advice(const Placement& placement) const {
  const std::optional<Verdict> v = verdict(placement);
  if (!v || v->cause.empty()) return "";
  return str("the trainer's matrix products ran at ", static_cast<int>(std::lround(v->gflops)), " GFLOP/s, ",
             static_cast<int>(std::lround(100 * v->gflops / v->expected_gflops)), "% of what ", v->threads,
             v->threads == 1 ? " thread" : " threads", " of this host measured at start (",
             static_cast<int>(std::lround(v->expected_gflops)), " GFLOP/s); likely cause: ", v->cause);
}

nlohmann::ordered_json MatmulSpeedWatch::to_json(const Placement& placement) const {
  const std::optional<Verdict> v = verdict(placement);
  if (!v) return nullptr;
  nlohmann::ordered_json j;
  j["gflops"] = v->gflops;
  j["expected_gflops"] = v->expected_gflops;
  j["threads"] = v->threads;
  j["slow"] = !v->cause.empty();
  if (!v->cause.empty()) j["cause"] = v->cause;
  return j;
}

}  // namespace rlrun::orchestrator
