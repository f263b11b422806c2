// `rlrun trainer`: one trainer rank process (started by the orchestrator's launcher).

#include <cstdint>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/cli/commands.h"
#include "orchestrator/roles/trainer_process.h"
#include "orchestrator/run/workers/control_plane.h"

namespace rlrun::orchestrator {

int cmd_trainer(const Args& args) {
  static constexpr FlagSpec kFlags[] = {
      {"--orchestrator", true}, {"--rank", true}, {"--config", true}, {"--timeline", true}, {kControlKeysFlag, true},
      {"--resume-from", true}, {"--dp-group-epoch", true}, {"--weight-group-epoch", true}};
  Result<ConfigArgs> parsed = parse_config_args(args, kFlags);
  if (!parsed.ok()) return report_usage_error("trainer", parsed.status());
  Result<std::string> path = parsed->worker_config_path();
  if (!path.ok()) return report_usage_error("trainer", path.status());
  if (!parsed->has("--orchestrator"))
    return report_usage_error("trainer", invalid_argument("missing --orchestrator tcp://HOST:PORT; see --help"));
  Result<int64_t> rank = parsed->integer("--rank", 0, 0, 1 << 20);
  if (!rank.ok()) return report_usage_error("trainer", rank.status());
  Result<Config> config = load_config(*path, parsed->overrides);
  if (!config.ok()) return report_config_errors("trainer", config.status());
  if (*rank >= config->trainer_num_workers)
    return report_usage_error("trainer", invalid_argument(str("--rank ", *rank, " but trainer_num_workers is ",
                                                              config->trainer_num_workers)));
  log::set_min_level(config->log_level);
  log::set_process_name(worker_name(Role::kTrainer, *rank));
  TrainerProcessOptions options;
  options.orchestrator = parsed->value("--orchestrator");
  options.rank = static_cast<int>(*rank);
  options.timeline_path = parsed->value("--timeline");
  Result<SecurityOptions> security = worker_control_security(parsed->value(kControlKeysFlag));
  if (!security.ok()) return report_usage_error("trainer", security.status());
  options.control_security = std::move(*security);
  options.resume_from = parsed->value("--resume-from");
  // A restarted trainer group: the data-parallel group "dp-<N>", the weight group at the first sync (-1).
  Result<int64_t> dp_epoch = parsed->integer("--dp-group-epoch", 0, 0, INT32_MAX);
  if (!dp_epoch.ok()) return report_usage_error("trainer", dp_epoch.status());
  Result<int64_t> weight_epoch = parsed->integer("--weight-group-epoch", 0, -1, INT32_MAX);
  if (!weight_epoch.ok()) return report_usage_error("trainer", weight_epoch.status());
  options.dp_group_epoch = static_cast<int>(*dp_epoch);
  options.weight_group_epoch = static_cast<int>(*weight_epoch);
  return run_trainer_process(*config, options);
}

}  // namespace rlrun::orchestrator
