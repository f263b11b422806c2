#include "orchestrator/run/run_recorder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "common/file_io.h"
#include "common/observe/log.h"
#include "engine/backend_info.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/tune/loop_costs.h"
#include "orchestrator/tune/tune.h"

namespace rlrun::orchestrator {

namespace {

// "35s", "4m05s", "2h03m": a remaining time for a person.
std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  char out[32];
  if (s < 60) std::snprintf(out, sizeof out, "%llds", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(out, sizeof out, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else std::snprintf(out, sizeof out, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  return out;
}

}  // namespace

RunRecorder::RunRecorder(const Config& config, const std::string& run_dir, const StepTally& steps,
                         const std::vector<WorkerSlot>& workers, RunMetrics& metrics, LoopPort port)
    : config_(config), run_dir_(run_dir), steps_(steps), workers_(workers), metrics_(metrics), port_(std::move(port)) {}

void RunRecorder::resume_from(const ResumeState& state) {
  resumed_steps_ = state.steps_completed;
  resumed_loop_seconds_ = state.loop_seconds;
  stats_.trainer_idle_seconds = state.trainer_idle_seconds;
}

void RunRecorder::loop_started() {
  looping_ = true;
  loop_start_ = port_.now();
  loop_cpu_start_ = process_cpu_seconds();
}

void RunRecorder::loop_stopped() {
  if (!looping_) return;
  stats_.loop_seconds = loop_seconds();
  looping_ = false;
}

double RunRecorder::loop_seconds() const {
  return resumed_loop_seconds_ + (looping_ ? port_.seconds_since(loop_start_) : 0.0);
}

void RunRecorder::trainer_idle(double seconds) {
  stats_.trainer_idle_seconds += seconds;
  metrics_.trainer_idle_seconds->Increment(seconds);
}

void RunRecorder::write_step_line(const StepLine& in) {
  const StepRecord& record = in.record;
  // ordered: the keys in the order a person reads them; a non-finite double dumps as null.
  nlohmann::ordered_json line = {{"step", steps_.completed},
                                 {"reward_mean", record.reward_mean},
                                 {"reward_std", record.reward_std},
                                 {"wait_seconds", in.wait_seconds},
                                 {"train_seconds", in.train_seconds},
                                 {"weight_sync_seconds", in.sync_seconds},
                                 {"tokens_trained", record.build.tokens},
                                 {"tokens_generated_total", steps_.tokens_generated},
                                 {"async_level", in.async_level},
                                 {"discarded_total", in.discarded_total},
                                 {"group_ids", record.group_ids},
                                 {"prompt_hash", record.prompt_hash}};
  // After a trainer restart the step numbers go back to the checkpoint's: the steps trained again
  // from their kept batches say so, and every later line counts the restarts so far.
  if (record.redone) line["redone"] = true;
  if (in.trainer_restarts > 0) line["trainer_restarts"] = in.trainer_restarts;
  if (in.eval_accuracy) line["eval_accuracy"] = *in.eval_accuracy;
  line["reward_terms"] = in.reward_terms;  // each task.reward term's mean (unweighted), samples scored since the last step
  if (!in.reward_server_logs.empty()) line["reward_server_logs"] = in.reward_server_logs;
  if (in.reward_waiting) line["reward_waiting"] = *in.reward_waiting;
  line["trainer"] = in.trainer;
  append_run_file((std::filesystem::path(run_dir_) / "metrics.jsonl").string(), line.dump() + '\n');
}

void RunRecorder::log_samples(const char* kind, int64_t step, const std::vector<nlohmann::ordered_json>& samples) const {
  if (samples.empty()) return;
  std::string lines;
  for (const nlohmann::ordered_json& sample : samples) {
    nlohmann::ordered_json line = {{"step", step}, {"kind", kind}};
    line.update(sample);
    // completions are untrusted bytes: invalid UTF-8 is replaced, never a throw
    lines += line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + '\n';
  }
  append_run_file((std::filesystem::path(run_dir_) / "samples.jsonl").string(), lines);
}

void RunRecorder::append_run_file(const std::string& path, const std::string& lines) const {
  const Result<bool> rotated = rotate_if_larger(path, config_.log_files_max_mb << 20);
  if (!rotated.ok()) log::warn(str(rotated.status().message(), " (log_files_max_mb)"));
  else if (*rotated) log::info(str(path, " passed log_files_max_mb = ", config_.log_files_max_mb, " MiB: renamed ", path, ".1"));
  std::ofstream out(path, std::ios::app);
  out << lines;
  if (!out) log::warn(str("could not append to ", path));
}

void RunRecorder::print_progress(double reward_mean, std::optional<double> eval_accuracy) {
  const double loop = std::max(1e-9, loop_seconds());
  const double rollout_idle = rollout_idle_fraction(workers_, loop);
  const int64_t done = steps_.completed, total = config_.number_of_steps;
  const int64_t this_run = done - resumed_steps_;
  const double eta =
      this_run > 0 ? port_.seconds_since(loop_start_) / static_cast<double>(this_run) * static_cast<double>(total - done) : 0;
  char reward[16];
  std::snprintf(reward, sizeof reward, "%.3f", reward_mean);
  std::string line = str("step ", done, "/", total, "  ETA ", format_duration(eta), "  reward ", reward);
  if (eval_accuracy) {
    char acc[16];
    std::snprintf(acc, sizeof acc, "%.3f", *eval_accuracy);
    line += str("  accuracy ", acc);
  }
  line += str("  idle trainer ", static_cast<int>(100 * stats_.trainer_idle_seconds / loop), "% rollout ",
              static_cast<int>(100 * rollout_idle), "%  tok/s gen ",
              static_cast<int64_t>(static_cast<double>(steps_.tokens_generated) / loop), " train ",
              static_cast<int64_t>(static_cast<double>(steps_.tokens_trained) / loop));
  // a terminal: one line redrawn in place; a pipe or file: a line at most every 30 s (and the last);
  // logs/orchestrator.log: every step
  log::status(line, done == total);
  if (done == total) log::end_status();
}

void RunRecorder::set_cluster_shape(int64_t nodes, int64_t slots_per_node) {
  profile_.rollout_workers = config_.inference_num_workers;
  profile_.trainer_ranks = config_.trainer_num_workers;
  profile_.on_devices = config_.backend == BackendKind::kCuda;
  profile_.nodes = std::max<int64_t>(1, nodes);
  profile_.slots_per_node = std::max<int64_t>(1, slots_per_node);
  const int64_t per_node = (profile_.rollout_workers + profile_.trainer_ranks + profile_.nodes - 1) / profile_.nodes;
  profile_.threads = config_.cpu_threads_per_worker > 0 ? config_.cpu_threads_per_worker
                                                        : std::max<int64_t>(1, profile_.slots_per_node / per_node);
  // load_config() read the checkpoint already, so its model is known to read.
  const Result<engine::ModelConfig> model = model_config_from(config_.model);
  profile_.parameters = model.ok() ? model->num_parameters() : 0;
  if (!profile_.on_devices) {  // ~60 ms; this node's, which is the trainer's under the local launcher
    const engine::HostCompute host = engine::measure_host_compute();
    profile_.host = {{"node", "the orchestrator's"},
                     {"summary", host.summary},
                     {"sgemm_gflops_one_thread", host.sgemm_gflops},
                     {"fp32_peak_gflops_one_core", host.fma_peak_gflops},
                     {"widest_kernels", host.widest_kernels}};
  }
}

void RunRecorder::after_step(int64_t step, const std::map<std::string, double>& rank0, double train_seconds,
                             double sync_seconds, std::optional<int> base_trainer_threads,
                             std::optional<double> reward_seconds) {
  const auto threads = rank0.find("cpu_threads");
  if (!base_trainer_threads || threads == rank0.end() || static_cast<int>(threads->second) == *base_trainer_threads)
    profile_.on_train_step(rank0, train_seconds, sync_seconds);
  else  // how much faster the lend made it: `rlrun tune` simulates the balancing with it
    profile_.on_lent_train_step(rank0, static_cast<int64_t>(threads->second));
  matmul_.on_step(rank0);
  if (!matmul_warned_) {
    if (const std::string slow = matmul_.advice(placement()); !slow.empty()) {
      matmul_warned_ = true;  // once; the end of the run says it again with every step's figures
      log::warn(slow);
    }
  }
  if (step % kProfileEvery == 0) save_profile(reward_seconds);
  if (step % kAdviseEvery == 0) advise(false);
}

MatmulSpeedWatch::Placement RunRecorder::placement() const {
  const int64_t processes_per_node =
      (profile_.rollout_workers + profile_.trainer_ranks + profile_.nodes - 1) / profile_.nodes;
  return MatmulSpeedWatch::Placement{processes_per_node * profile_.threads, profile_.slots_per_node};
}

void RunRecorder::save_profile(std::optional<double> reward_seconds) {
  // After the loop, loop_seconds() no longer counts this process's part: the statistics have it.
  profile_.trainer_matmul = matmul_.to_json(placement());
  profile_.set_loop(looping_ ? loop_seconds() : stats_.loop_seconds, process_cpu_seconds() - loop_cpu_start_);
  if (reward_seconds) profile_.set_reward_seconds(*reward_seconds);
  const std::string path = (std::filesystem::path(run_dir_) / "profile.json").string();
  if (Status s = profile_.write(path); !s.ok() && !profile_write_failed_) {
    profile_write_failed_ = true;  // once: the run goes on, `rlrun tune` will say what is missing
    log::warn(str("could not write the loop profile for rlrun tune: ", s.message()));
  }
}

void RunRecorder::advise(bool at_end) {
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
  const double loop = std::max(1e-9, stats_.loop_seconds);
  const double trainer_idle = stats_.trainer_idle_seconds / loop;
  const double rollout_idle = rollout_idle_fraction(workers_, loop);
  const bool idled = trainer_idle > config_.advise_idle_threshold || rollout_idle > config_.advise_idle_threshold;
  j["idle_threshold_exceeded"] = idled;
  stats_.tuning = std::move(j);
  const std::string line = tune::advice_line(advice);
  if (idled && !line.empty())
    log::info(str("the ", trainer_idle > rollout_idle ? "trainer" : "rollout workers", " idled ",
                  static_cast<int>(100 * std::max(trainer_idle, rollout_idle)), "% of the loop; ", line,
                  "; see `rlrun tune ", run_dir_, "`"));
}

void RunRecorder::finish(std::optional<double> reward_seconds) {
  if (looping_) stats_.loop_seconds = loop_seconds();
  if (steps_.completed > resumed_steps_) {
    save_profile(reward_seconds);
    advise(true);
    stats_.trainer_matmul = matmul_.to_json(placement());
    if (const std::string slow = matmul_.advice(placement()); !slow.empty()) log::warn(str("over the run, ", slow));
  }
}

}  // namespace rlrun::orchestrator
