// run/workers/cores.cc - balance_cpu_threads: the orchestrator measures each side's idle time per window
// of steps, CoreBalance (run/workers/core_balance.h) decides, and SetThreads tells the workers.
#include <algorithm>

#include "common/observe/log.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

void Orchestrator::start_core_balance() {
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
  core_balance_.emplace(base, static_cast<int>(config_.trainer_num_workers),
                        static_cast<int>(config_.inference_num_workers));
  outcome_.cores_base = base;
}

LoopTotals Orchestrator::loop_totals(int64_t step) const {
  LoopTotals totals;
  totals.step = step;
  totals.loop_seconds = loop_seconds();
  totals.trainer_idle_seconds = outcome_.trainer_idle_seconds;
  for (const WorkerSlot& w : workers_)
    if (w.role == Role::kRollout) totals.rollout_idle_seconds += w.idle_seconds;
  totals.rollout_scoring_cpu = rollout_scoring_cpu_;
  return totals;
}

void Orchestrator::balance_cores(int64_t step) {
  if (!core_balance_ || step >= config_.number_of_steps) return;  // no step left to use a change
  const std::optional<WindowLoad> window = load_windows_.at_step_end(
      loop_totals(step), static_cast<int>(config_.inference_num_workers), core_balance_->current().rollout_threads);
  if (!window) return;
  const WindowLoad& load = *window;
  log::debug(str("cores window to step ", step, ": trainer idle ", load.trainer_idle, ", rollout idle ",
                 load.rollout_idle, ", ", load.seconds_per_step, " s/step"));
  const std::optional<CoreBalance::Change> change = core_balance_->observe(load);
  if (!change) return;
  log::info(str("cores after step ", step, ": ", change->reason));
  outcome_.core_changes.push_back({step, change->share, change->reason});
  for (WorkerSlot& w : workers_) send_threads(w);
}

void Orchestrator::send_threads(WorkerSlot& w) {
  if (!w.registered || !w.alive()) return;
  const CoreShare& share = core_balance_->current();
  const int threads = w.role == Role::kTrainer ? share.trainer_threads : share.rollout_threads;
  if (threads == w.compute_threads) return;
  const std::string reason = core_balance_->current() == core_balance_->base()
                                 ? "its share of the node's cores"
                                 : "cores the other side idles on (balance_cpu_threads)";
  if (const Status s = server_.send(w.name, SetThreads{static_cast<uint32_t>(threads), reason}); !s.ok()) {
    log::warn(str("could not tell ", w.name, " to compute with ", threads, " threads: ", s.message()));
    return;
  }
  w.compute_threads = threads;
  note_threads(w);
}

void Orchestrator::note_threads(const WorkerSlot& w) {
  if (auto it = metrics_.compute_threads.find(w.name); it != metrics_.compute_threads.end())
    it->second->Set(w.compute_threads);
}

}  // namespace rlrun::orchestrator
