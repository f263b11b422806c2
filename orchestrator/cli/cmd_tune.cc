// `rlrun tune RUN_DIR [--set key=value ...] [--cluster SPEC] [--json]`: what other worker counts,
// asynchrony and lanes would do to the seconds per step and the idle gaps, predicted by simulating
// the loop with the costs the run measured (orchestrator/tune/). The work lives in tune/; this file
// reads the run folder, parses flags and prints.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "common/config/config.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/report/run_folder.h"
#include "orchestrator/tune/loop_costs.h"
#include "orchestrator/tune/tune.h"

namespace rlrun::orchestrator {
namespace {

// The keys --set may change: the simulator models these and nothing else.
const std::set<std::string> kTunable = {"inference_num_workers",  "trainer_num_workers",
                                        "max_async_rollout",      "number_of_minibatches",
                                        "prompts_batch_size_for_trainer", "max_concurrent_prompts_per_server",
                                        "cpu_threads_per_worker", "kl_reference_on",
                                        "balance_cpu_threads"};

Status check_overrides(const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    if (!kTunable.contains(key)) {
      std::string keys;
      for (const std::string& k : kTunable) keys += str(keys.empty() ? "" : ", ", k);
      return invalid_argument(str("--set ", o, ": rlrun tune predicts only these keys: ", keys));
    }
  }
  return Status();
}

// What the run measured, for the line above the table (metrics.jsonl and summary.json).
std::string measured_line(const std::string& dir) {
  Result<RunFolder> run = read_run_folder(dir, 0);
  if (!run.ok()) return "";
  double loop = 0;
  int64_t n = 0;
  for (const StepMetrics& m : run->steps) {
    const double s = m.wait_seconds + m.train_seconds + m.weight_sync_seconds;
    if (!std::isfinite(s)) continue;
    loop += s;
    ++n;
  }
  if (n == 0) return "";
  const double trainer = summary_number(*run, {"trainer_idle_fraction"});
  const double rollout = summary_number(*run, {"rollout_idle_fraction"});
  char line[200];
  std::snprintf(line, sizeof line, "measured: %.3f s/step over %lld steps", loop / static_cast<double>(n),
                static_cast<long long>(n));
  std::string out = line;
  if (std::isfinite(trainer) && std::isfinite(rollout)) {
    std::snprintf(line, sizeof line, ", trainer idle %.0f%%, rollout idle %.0f%%", 100 * trainer, 100 * rollout);
    out += line;
  }
  return out + "\n";
}

}  // namespace

int cmd_tune(const Args& args) {
  static constexpr FlagSpec kFlags[] = {{"--json", false}, {"--cluster", true}, {"--seed", true}};
  Result<ConfigArgs> parsed = parse_config_args(args, kFlags);
  if (!parsed.ok()) return report_usage_error("tune", parsed.status());
  const std::string dir = parsed->config_path;
  if (dir.empty()) return report_usage_error("tune", invalid_argument("missing RUN_DIR; see --help"));
  if (!std::filesystem::is_directory(dir))
    return report_usage_error("tune", invalid_argument(str(dir, " is not a run folder (give the run_dir of a run)")));
  if (Status s = check_overrides(parsed->overrides); !s.ok()) return report_usage_error("tune", s);
  Result<int64_t> seed = parsed->integer("--seed", 1, 0, INT64_MAX);
  if (!seed.ok()) return report_usage_error("tune", seed.status());

  const std::string config_path = (std::filesystem::path(dir) / "config.yaml").string();
  Result<Config> config = load_config(config_path, parsed->overrides);
  if (!config.ok()) return report_config_errors("tune", config.status());
  Result<tune::LoopProfile> profile = tune::LoopProfile::read((std::filesystem::path(dir) / "profile.json").string());
  if (!profile.ok()) {
    std::fprintf(stderr, "rlrun tune: %s (a run writes profile.json every 10 steps and when it ends)\n",
                 profile.status().message().c_str());
    return kExitFailed;
  }
  Result<tune::LoopCosts> costs = tune::fit_costs(*profile);
  if (!costs.ok()) {
    std::fprintf(stderr, "rlrun tune: %s: %s\n", dir.c_str(), costs.status().message().c_str());
    return kExitFailed;
  }
  tune::Cluster cluster = tune::cluster_from(*profile);
  if (parsed->has("--cluster")) {
    Result<tune::Cluster> c = tune::parse_cluster(parsed->value("--cluster"), cluster);
    if (!c.ok()) return report_usage_error("tune", c.status());
    cluster = *c;
  }
  const auto start = std::chrono::steady_clock::now();
  const tune::Advice advice = tune::advise(*costs, tune::settings_from(*config), cluster,
                                           tune::sim_options(config->number_of_steps, static_cast<uint64_t>(*seed)));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (parsed->has("--json")) {
    std::printf("%s\n", tune::advice_json(advice, !parsed->overrides.empty()).dump(2).c_str());
    return kExitOk;
  }
  std::printf("%s%s%s", measured_line(dir).c_str(), tune::describe_costs(*costs).c_str(),
              tune::render_advice(advice, 8).c_str());
  std::printf("(%zu candidates simulated in %.2f s; cluster: %lld node(s) x %lld %s)\n", advice.candidates.size(), took,
              static_cast<long long>(cluster.nodes), static_cast<long long>(cluster.slots_per_node),
              cluster.devices ? "GPUs" : "cores");
  return kExitOk;
}

}  // namespace rlrun::orchestrator
