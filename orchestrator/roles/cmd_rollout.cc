// `rlrun rollout`: one rollout worker process (started by the orchestrator's launcher).
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "common/observe/timeline.h"
#include "engine/backend.h"
#include "engine/backend_info.h"
#include "engine/io/model_io.h"
#include "engine/model/model.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/cli/commands.h"
#include "orchestrator/roles/compute_backend.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/roles/rollout_hooks.h"
#include "orchestrator/run/workers/control_plane.h"
#include "orchestrator/run/workers/rendezvous.h"
#include "rollout/prefill_budget.h"
#include "rollout/scheduler.h"
#include "rollout/worker.h"

namespace rlrun::orchestrator {

namespace {

// rollout_cpu_nice: before any other thread exists (Linux keeps a nice value per thread, and new
// threads inherit it), so the OpenMP and ZeroMQ threads run at it too. Lowering one's own priority
// needs no privilege; a failure is only logged.
void lower_cpu_priority(int index, int by) {
  errno = 0;
  if (::nice(by) == -1 && errno != 0) {
    log::warn(str("rollout ", index, ": could not lower its CPU priority (rollout_cpu_nice ", by, "): ",
                  std::strerror(errno)));
    return;
  }
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, 0);
  log::info(str("rollout ", index, ": runs at nice ", errno == 0 ? std::to_string(now) : std::string("?"),
                " (rollout_cpu_nice: the trainer gets shared cores first)"));
}

RolloutHooksFactory& hooks_factory() {
  static RolloutHooksFactory factory;
  return factory;
}

// weight_group_epoch < 0: no weight-sync group yet; the first WeightSyncBegin names the one to join.
int serve(const Config& config, rollout::WorkerOptions options, int weight_group_epoch) {
  if (config.backend != BackendKind::kCpu) {
    log::error("rollout: only backend cpu is implemented for rollout workers so far");
    return kExitUsage;
  }
  const int threads = static_cast<int>(config.cpu_threads_per_worker);
  Result<std::unique_ptr<engine::Backend>> backend = backend_from_config(config, threads);
  if (!backend.ok()) return log::error(backend.status().message()), kExitFailed;
  Result<engine::ModelConfig> model_config = model_config_from(config.model);
  if (!model_config.ok()) return log::error(str("rollout: ", model_config.status().message())), kExitUsage;
  engine::ModelOptions model_options;
  model_options.weight_storage = frozen_weight_storage(config);  // changed by weight sync only
  Result<std::unique_ptr<engine::Model>> model = engine::Model::create(**backend, *model_config, model_options);
  if (!model.ok()) return log::error(str("rollout: ", model.status().message())), kExitUsage;
  if (!config.model.checkpoint.empty()) {
    // load_config() took the model's shape from the checkpoint's config.json.
    if (Status s = engine::load_weights(**model, config.model.checkpoint); !s.ok())
      return log::error(str("rollout: ", s.message())), kExitUsage;
  } else {
    // Same seed and init as the trainer's random start; every run's first weight sync replaces it.
    (*model)->weights().init_random(static_cast<uint64_t>(config.seed), static_cast<float>(config.model.init_std));
  }
  (*model)->weights().release_grads();  // generation only: an fp32 model's gradient buffer is its size again
  // lora_rank > 0: generation adds the adapters beside the frozen base weights (the low-rank
  // products, no merge), and each weight sync carries the adapters only (rollout/weight_update.h).
  Result<std::unique_ptr<engine::LoraWeights>> lora = lora_from_config(config, **backend, (*model)->config());
  if (!lora.ok()) return log::error(str("rollout: ", lora.status().message())), kExitUsage;
  if (*lora != nullptr) {
    if (Status s = (*model)->attach_lora(lora->get()); !s.ok()) return log::error(str("rollout: ", s.message())), kExitUsage;
  }
  rollout::SchedulerOptions scheduler_options = scheduler_options_from(config, **model);
  // The first line that says how fast this process computes (and which kernels it runs).
  const engine::HostCompute host = engine::measure_host_compute();
  log::info(str("rollout ", options.index, ": ", host.summary));
  if (config.max_prefill_tokens == 0) {
    scheduler_options.max_prefill_tokens =
        rollout::plan_prefill_tokens((*model)->config(), host.sgemm_gflops, (*backend)->compute_threads());
    log::info(str("rollout ", options.index, ": prefills at most ", scheduler_options.max_prefill_tokens,
                  " prompt tokens per engine step (max_prefill_tokens 0: planned for ~", rollout::kPrefillStepSeconds,
                  " s at the measured speed)"));
  }
  Result<std::unique_ptr<rollout::Scheduler>> scheduler = rollout::Scheduler::create(**model, scheduler_options);
  if (!scheduler.ok()) return log::error(str("rollout: ", scheduler.status().message())), kExitUsage;
  options.heartbeat_interval_seconds = config.heartbeat_interval_seconds;
  options.heartbeat_timeout_seconds = config.heartbeat_timeout_seconds;
  options.max_weight_bucket_bytes = config.weight_broadcast_bucket_mb << 20;
  // The weight-sync group (trainer rank 0 + every rollout worker), formed through the
  // orchestrator's rendezvous store: the run's first workers join epoch 0 before registering; a
  // replacement (epoch -1), and every member after a member died, joins the epoch a
  // WeightSyncBegin names.
  options.join_weight_group = [&config, endpoint = options.orchestrator, index = options.index,
                                security = options.control_security](uint32_t epoch) {
    return join_group(endpoint, worker_name(Role::kRollout, index),
                      weight_sync_group(config, index + 1, static_cast<int>(epoch), security), security);
  };
  std::unique_ptr<engine::Communicator> weight_comm;
  if (weight_group_epoch >= 0) {
    Result<std::unique_ptr<engine::Communicator>> joined = options.join_weight_group(weight_group_epoch);
    if (joined.ok()) {
      weight_comm = std::move(*joined);
      options.weight_group_epoch = weight_group_epoch;
    } else {  // a member died while the group formed: the orchestrator re-forms it at the first sync
      log::warn(str("rollout ", options.index, ": ", joined.status().message(), "; joining at the first sync"));
    }
  }
  rollout::KlReference kl_reference;  // its weights are allocated at the sync that carries them
  if (rollout_scores_kl_reference(config)) options.kl_reference = &kl_reference;
  rollout::Worker worker(**scheduler, weight_comm.get(), options);
  const Status s = worker.run();
  if (!s.ok()) return log::error(s.message()), kExitFailed;
  log::info(str("rollout ", options.index, ": ", worker.summary().exit_reason, "; ", worker.summary().results_sent,
                " results sent"));
  return kExitOk;
}

}  // namespace

int cmd_rollout(const Args& args) {
  static constexpr FlagSpec kFlags[] = {
      {"--orchestrator", true}, {"--index", true}, {"--config", true}, {"--host", true},
      {"--weight-group-epoch", true}, {kControlKeysFlag, true}, {"--incarnation", true}, {"--timeline", true}};
  Result<ConfigArgs> parsed = parse_config_args(args, kFlags);
  if (!parsed.ok()) return report_usage_error("rollout", parsed.status());
  Result<std::string> path = parsed->worker_config_path();
  if (!path.ok()) return report_usage_error("rollout", path.status());
  if (!parsed->has("--orchestrator"))
    return report_usage_error("rollout", invalid_argument("missing --orchestrator tcp://HOST:PORT; see --help"));
  if (!parsed->has("--index")) return report_usage_error("rollout", invalid_argument("missing --index I; see --help"));
  Result<int64_t> index = parsed->integer("--index", 0, 0, 1 << 20);
  if (!index.ok()) return report_usage_error("rollout", index.status());
  // --incarnation N: the Nth replacement of this worker (0: started with the run).
  Result<int64_t> incarnation = parsed->integer("--incarnation", 0, 0, 1 << 20);
  if (!incarnation.ok()) return report_usage_error("rollout", incarnation.status());
  Result<int64_t> epoch = parsed->integer("--weight-group-epoch", -1, -1, INT32_MAX);
  if (!epoch.ok()) return report_usage_error("rollout", epoch.status());
  Result<Config> config = load_config(*path, parsed->overrides);
  if (!config.ok()) return report_config_errors("rollout", config.status());
  log::set_min_level(config->log_level);
  // A synchronous loop never computes both at once: the priority would only slow its hand-offs.
  if (config->backend == BackendKind::kCpu && config->max_async_rollout > 0 && config->rollout_cpu_nice > 0)
    lower_cpu_priority(static_cast<int>(*index), static_cast<int>(config->rollout_cpu_nice));
  if (config->backend == BackendKind::kCpu) keep_freed_heap_memory();  // before the model (common/observe/memory.h)
  rollout::WorkerOptions options;
  options.orchestrator = parsed->value("--orchestrator");
  options.index = static_cast<int32_t>(*index);
  options.host = parsed->value("--host");
  Result<SecurityOptions> security = worker_control_security(parsed->value(kControlKeysFlag));
  if (!security.ok()) return report_usage_error("rollout", security.status());
  options.control_security = std::move(*security);
  std::unique_ptr<rollout::WorkerHooks> hooks;
  if (hooks_factory()) hooks = hooks_factory()(options.index, static_cast<int>(*incarnation));
  options.hooks = hooks.get();
  if (parsed->has("--timeline")) {
    const Status s = global_timeline().open(parsed->value("--timeline"), worker_name(Role::kRollout, *index));
    if (!s.ok()) log::warn(str("rollout ", *index, ": no timeline: ", s.message()));
    global_timeline().set_rotate_bytes(config->timeline_max_mb << 20);
  }
  const int code = serve(*config, options, static_cast<int>(*epoch));
  global_timeline().close();
  return code;
}

void set_rollout_hooks_factory(RolloutHooksFactory factory) { hooks_factory() = std::move(factory); }

}  // namespace rlrun::orchestrator
