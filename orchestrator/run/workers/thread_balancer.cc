#include "orchestrator/run/workers/thread_balancer.h"

#include <algorithm>
#include <cmath>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

ThreadBalancer::ThreadBalancer(const Config& config, std::vector<WorkerSlot>& workers, RunMetrics& metrics,
                               LoopPort port)
    : config_(config), workers_(workers), metrics_(metrics), port_(std::move(port)) {}

void ThreadBalancer::start() {
  // It applies where the threads are the run's to choose (cpu_threads_per_worker: 0, the CPU
  // backend) and the processes share cores: every worker on one node.
  if (!config_.balance_cpu_threads || config_.backend != BackendKind::kCpu || config_.cpu_threads_per_worker > 0)
    return;
  const WorkerSlot* trainer = nullptr;
  const WorkerSlot* rollout = nullptr;
  for (const WorkerSlot& w : workers_) {
    if (w.spec.node != workers_.front().spec.node) return;
    (w.role == Role::kTrainer ? trainer : rollout) = &w;
  }
  if (trainer == nullptr || rollout == nullptr) return;
  const CoreShare base{std::max(1, trainer->spec.cpus), std::max(1, rollout->spec.cpus)};
  balance_.emplace(base, static_cast<int>(config_.trainer_num_workers), static_cast<int>(config_.inference_num_workers));
  stats_.base = base;
}

std::optional<int> ThreadBalancer::base_trainer_threads() const {
  if (!balance_) return std::nullopt;
  return balance_->base().trainer_threads;
}

void ThreadBalancer::on_register(WorkerSlot& w) {
  note_threads(w);
  if (balance_) send_threads(w);
}

void ThreadBalancer::on_scoring_seconds(WorkerSlot& w, double seconds) {
  if (!std::isfinite(seconds)) return;
  // Cumulative per process (a new process starts from 0: WorkerFleet::on_register).
  rollout_scoring_cpu_ += std::max(0.0, seconds - w.kl_reference_seconds);
  w.kl_reference_seconds = seconds;
}

void ThreadBalancer::after_step(int64_t step, int64_t steps, LoopTotals totals) {
  if (!balance_ || step >= steps) return;  // no step left to use a change
  totals.rollout_scoring_cpu = rollout_scoring_cpu_;
  const std::optional<WindowLoad> window = windows_.at_step_end(
      totals, static_cast<int>(config_.inference_num_workers), balance_->current().rollout_threads);
  if (!window) return;
  const WindowLoad& load = *window;
  log::debug(str("cores window to step ", step, ": trainer idle ", load.trainer_idle, ", rollout idle ",
                 load.rollout_idle, ", ", load.seconds_per_step, " s/step"));
  const std::optional<CoreBalance::Change> change = balance_->observe(load);
  if (!change) return;
  log::info(str("cores after step ", step, ": ", change->reason));
  stats_.changes.push_back({step, change->share, change->reason});
  for (WorkerSlot& w : workers_) send_threads(w);
}

void ThreadBalancer::send_threads(WorkerSlot& w) {
  if (!w.registered || !w.alive()) return;
  const CoreShare& share = balance_->current();
  const int threads = w.role == Role::kTrainer ? share.trainer_threads : share.rollout_threads;
  if (threads == w.compute_threads) return;
  const std::string reason = balance_->current() == balance_->base() ? "its share of the node's cores"
                                                                     : "cores the other side idles on (balance_cpu_threads)";
  if (const Status s = port_.send_to(w.name, SetThreads{static_cast<uint32_t>(threads), reason}); !s.ok()) {
    log::warn(str("could not tell ", w.name, " to compute with ", threads, " threads: ", s.message()));
    return;
  }
  w.compute_threads = threads;
  note_threads(w);
}

void ThreadBalancer::note_threads(const WorkerSlot& w) {
  if (auto it = metrics_.compute_threads.find(w.name); it != metrics_.compute_threads.end())
    it->second->Set(w.compute_threads);
}

}  // namespace rlrun::orchestrator
