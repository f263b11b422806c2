// run/cores.cc - balance_cpu_threads: the orchestrator measures each side's idle time per window
// of steps, CoreBalance (run/core_balance.h) decides, and SetThreads tells the workers.
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
  core_window_ = core_sums(outcome_.steps_completed);
}

Orchestrator::CoreWindow Orchestrator::core_sums(int64_t step) const {
  CoreWindow sums;
  sums.step = step;
  sums.loop = loop_seconds();
  sums.trainer_idle = outcome_.trainer_idle_seconds;
  for (const WorkerSlot& w : workers_)
    if (w.role == Role::kRollout) sums.rollout_idle += w.idle_seconds;
  sums.rollout_scoring = rollout_scoring_cpu_;
  return sums;
}

void Orchestrator::balance_cores(int64_t step) {
  if (!core_balance_ || step >= config_.number_of_steps) return;  // no step left to use a change
  CoreWindow now = core_sums(step);
  now.opened = true;
  if (!core_window_.opened) {
    // The loop's first step waited for the rollout's first batch, which no share of threads
    // changes (the trainer had nothing to do yet): windows start after it.
    core_window_ = now;
    return;
  }
  const double loop = now.loop - core_window_.loop;
  if (now.step - core_window_.step < CoreBalance::kWindowSteps || loop < CoreBalance::kWindowSeconds) return;
  // The rollout workers' idle time, less the CPU they spent scoring the KL reference (done while
  // no lane is in use): per worker, as a fraction of the window.
  const double rollouts = static_cast<double>(config_.inference_num_workers);
  const double rollout_threads = static_cast<double>(core_balance_->current().rollout_threads);
  const double idle = (now.rollout_idle - core_window_.rollout_idle) / (rollouts * loop);
  const double scoring = (now.rollout_scoring - core_window_.rollout_scoring) / (rollouts * rollout_threads * loop);
  WindowLoad load;
  load.trainer_idle = std::clamp((now.trainer_idle - core_window_.trainer_idle) / loop, 0.0, 1.0);
  load.rollout_idle = std::clamp(idle - scoring, 0.0, 1.0);
  load.seconds_per_step = loop / static_cast<double>(now.step - core_window_.step);
  core_window_ = now;
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
