// `rlrun plan CONFIG [--set key=value ...] [--json]`: the memory budget of every process before
// anything starts; `rlrun plan --compare RUN_DIR`: that plan beside the run's measured peaks.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config/config.h"
#include "common/file_io.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/plan/memory_advice.h"
#include "orchestrator/plan/memory_report.h"

namespace rlrun::orchestrator {

namespace {

int compare_with_run(const ConfigArgs& args) {
  const std::filesystem::path dir = args.value("--compare");
  const std::string config_path = (dir / "config.yaml").string(), summary_path = (dir / "summary.json").string();
  Result<Config> config = load_config(config_path, args.overrides);
  if (!config.ok()) return report_config_errors("plan", config.status());
  Result<std::string> text = read_file(summary_path, "run summary");
  if (!text.ok()) {
    std::fprintf(stderr, "rlrun plan: %s (a run writes it when it ends)\n", text.status().message().c_str());
    return kExitFailed;
  }
  Result<std::vector<MeasuredProcess>> measured = parse_run_summary(*text, summary_path);
  if (!measured.ok()) {
    std::fprintf(stderr, "rlrun plan: %s\n", measured.status().message().c_str());
    return kExitFailed;
  }
  Result<RunPlan> plan = plan_run(*config);
  if (!plan.ok()) {
    std::fprintf(stderr, "rlrun plan: %s\n", plan.status().message().c_str());
    return kExitUsage;
  }
  std::printf("plan vs measured for %s\n%s", dir.string().c_str(), render_comparison(*plan, *measured).c_str());
  return kExitOk;
}

}  // namespace

int cmd_plan(const Args& args) {
  static constexpr FlagSpec kFlags[] = {{"--json", false}, {"--compare", true}};
  Result<ConfigArgs> parsed = parse_config_args(args, kFlags);
  if (!parsed.ok()) return report_usage_error("plan", parsed.status());
  if (parsed->has("--compare")) {
    if (!parsed->config_path.empty())
      return report_usage_error("plan", invalid_argument("--compare RUN_DIR reads RUN_DIR/config.yaml; give no CONFIG"));
    return compare_with_run(*parsed);
  }
  if (parsed->config_path.empty()) return report_usage_error("plan", invalid_argument("missing CONFIG; see --help"));
  Result<Config> config = load_config(parsed->config_path, parsed->overrides);
  if (!config.ok()) return report_config_errors("plan", config.status());
  Result<RunPlan> plan = plan_run(*config);
  if (!plan.ok()) {
    std::fprintf(stderr, "rlrun plan: %s\n", plan.status().message().c_str());
    return plan.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  const std::vector<MemoryLever> levers = memory_levers(*config, *plan);
  const LeverPath path = levers_until_fit(*config, *plan);
  if (parsed->has("--json"))
    std::printf("%s\n", plan_to_json(*plan, levers, path, parsed->config_path).dump(2).c_str());
  else
    std::fputs(render_plan_text(*plan, levers, path, parsed->config_path).c_str(), stdout);
  return plan->fits() ? kExitOk : kExitPlanDoesNotFit;
}

}  // namespace rlrun::orchestrator
