// run/tuning.cc - the run measures its own loop (tune/loop_profile.h: <run_dir>/profile.json, what
// `rlrun tune` reads) and, at the end, says what to change when one side idled (tune/advisor.h).
#include <filesystem>

#include "common/clock.h"
#include "common/observe/log.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/orchestrator.h"
#include "orchestrator/tune/loop_costs.h"
#include "orchestrator/tune/tune.h"

namespace rlrun::orchestrator {

void Orchestrator::set_cluster_shape(int64_t nodes, int64_t slots_per_node) {
  profile_.rollout_workers = config_.inference_num_workers;
  profile_.trainer_ranks = config_.trainer_num_workers;
  profile_.on_devices = config_.backend == BackendKind::kCuda;
  profile_.nodes = std::max<int64_t>(1, nodes);
  profile_.slots_per_node = std::max<int64_t>(1, slots_per_node);
  const int64_t per_node = (profile_.rollout_workers + profile_.trainer_ranks + profile_.nodes - 1) / profile_.nodes;
  profile_.threads = config_.cpu_threads_per_worker > 0 ? config_.cpu_threads_per_worker
                                                        : std::max<int64_t>(1, profile_.slots_per_node / per_node);
  profile_.parameters = model_config_from(config_.model).num_parameters();
}

void Orchestrator::profile_step(int64_t step, const std::map<std::string, double>& rank0, double train_seconds) {
  // A step computed with threads lent by balance_cpu_threads (run/workers/cores.cc) measured another
  // configuration than the run's: its costs are left out, as the simulator gives each process its share.
  const auto threads = rank0.find("cpu_threads");
  if (core_balance_ == std::nullopt || threads == rank0.end() ||
      static_cast<int>(threads->second) == core_balance_->base().trainer_threads)
    profile_.on_train_step(rank0, train_seconds, last_sync_seconds_);
  else  // how much faster the lend made it: `rlrun tune` simulates the balancing with it
    profile_.on_lent_train_step(rank0, static_cast<int64_t>(threads->second));
  if (step % kProfileEvery == 0) save_profile();
  if (step % kAdviseEvery == 0) advise(false);
}

void Orchestrator::save_profile() {
  // After the loop (finish()), loop_seconds() no longer counts this process's part: the outcome has it.
  profile_.set_loop(looping_ ? loop_seconds() : outcome_.loop_seconds, process_cpu_seconds() - loop_cpu_start_);
  if (http_reward_ != nullptr) profile_.set_reward_seconds(http_reward_->stats().round_trip_median_seconds);
  const std::string path = (std::filesystem::path(metrics_jsonl_).parent_path() / "profile.json").string();
  if (Status s = profile_.write(path); !s.ok() && !profile_write_failed_) {
    profile_write_failed_ = true;  // once: the run goes on, `rlrun tune` will say what is missing
    log::warn(str("could not write the loop profile for rlrun tune: ", s.message()));
  }
}

void Orchestrator::advise(bool at_end) {
  Result<tune::LoopCosts> costs = tune::fit_costs(profile_);
  if (!costs.ok()) return;
  // In the loop the simulation holds up dispatch: a short one (~0.1 s for the grid) for the gauges.
  const int64_t steps = at_end ? config_.number_of_steps : kAdviseSteps;
  const tune::Advice advice = tune::advise(*costs, tune::settings_from(config_), tune::cluster_from(profile_),
                                           tune::sim_options(steps, 1));
  auto set = [&](const char* which, const tune::Candidate& c) {
    if (!c.prediction.feasible) return;
    metrics_.tune_seconds_per_step->Add({{"settings", which}}).Set(c.prediction.seconds_per_step);
    metrics_.tune_idle_fraction->Add({{"settings", which}, {"side", "trainer"}}).Set(c.prediction.trainer_idle_fraction);
    metrics_.tune_idle_fraction->Add({{"settings", which}, {"side", "rollout"}}).Set(c.prediction.rollout_idle_fraction);
  };
  set("current", advice.current);
  set("recommended", advice.recommended);
  const std::string change = tune::describe_change(advice.current.settings, advice.recommended.settings);
  metrics_.set_recommendation(change);
  if (!at_end) return;
  nlohmann::ordered_json j = tune::advice_json(advice, false);
  j.erase("candidates");  // `rlrun tune RUN_DIR` lists them
  const double loop = std::max(1e-9, outcome_.loop_seconds);
  const double trainer_idle = outcome_.trainer_idle_seconds / loop;
  const double rollout_idle = rollout_idle_fraction(loop);
  const bool idled = trainer_idle > config_.advise_idle_threshold || rollout_idle > config_.advise_idle_threshold;
  j["idle_threshold_exceeded"] = idled;
  outcome_.tuning = std::move(j);
  const std::string line = tune::advice_line(advice);
  if (idled && !line.empty())
    log::info(str("the ", trainer_idle > rollout_idle ? "trainer" : "rollout workers", " idled ",
                  static_cast<int>(100 * std::max(trainer_idle, rollout_idle)), "% of the loop; ", line,
                  "; see `rlrun tune ", std::filesystem::path(metrics_jsonl_).parent_path().string(), "`"));
}

}  // namespace rlrun::orchestrator
