// `rlrun validate CONFIG [--set key=value ...]`: load and check a config without running it.
#include <cstdio>

#include "common/config/config.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/roles/model_from_config.h"

namespace rlrun::orchestrator {

int cmd_validate(const Args& args) {
  static constexpr FlagSpec kFlags[] = {{"--print-defaults", false}, {"--print-reference", false}};
  Result<ConfigArgs> parsed = parse_config_args(args, kFlags);
  if (!parsed.ok()) return report_usage_error("validate", parsed.status());
  for (const char* flag : {"--print-defaults", "--print-reference"}) {
    if (!parsed->has(flag)) continue;
    if (!parsed->config_path.empty() || !parsed->overrides.empty())
      return report_usage_error("validate", invalid_argument(str(flag, " takes no CONFIG or --set")));
    const std::string text =
        std::string_view(flag) == "--print-defaults" ? render_defaults_yaml() : render_config_reference();
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  }
  if (parsed->config_path.empty()) {
    return report_usage_error("validate", invalid_argument("missing CONFIG; see --help"));
  }
  Result<Config> config = load_config(parsed->config_path, parsed->overrides);
  if (!config.ok()) return report_config_errors("validate", config.status());
  Result<std::string> effective = render_effective_config(*config);
  if (!effective.ok()) return report_config_errors("validate", effective.status());
  // What the model is, on stderr: stdout stays the effective config, YAML a run can load.
  const Result<engine::ModelConfig> model = model_config_from(config->model);
  if (!model.ok()) return report_config_errors("validate", model.status());
  std::fprintf(stderr, "model: %s\n", engine::describe_model(*model).c_str());
  std::fputs(effective->c_str(), stdout);
  return kExitOk;
}

}  // namespace rlrun::orchestrator
