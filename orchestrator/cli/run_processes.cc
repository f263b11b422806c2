// cli/run_processes.cc - a run's processes, from the placement to the last exit: the run's
// inputs (tokenizer, prompt format, task, reward), /metrics, the control plane, the workers and the
// Orchestrator's loop over them (run/orchestrator.h).
#include "orchestrator/cli/run_processes.h"

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "common/observe/log.h"
#include "common/observe/metrics.h"
#include "common/observe/timeline.h"
#include "orchestrator/launch/launch_target.h"
#include "orchestrator/launch/placement.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/orchestrator.h"
#include "orchestrator/run/workers/control_plane.h"

namespace rlrun::orchestrator {

namespace {

namespace fs = std::filesystem;

TaskSpec task_spec(const Config& c) {
  TaskSpec t;
  t.name = std::string(enum_name(c.task.name));
  t.dataset = c.task.dataset;
  t.eval_dataset = c.task.eval_dataset;
  t.prompt_field = c.task.prompt_field;
  t.answer_field = c.task.answer_field;
  t.messages_field = c.task.messages_field;
  t.eval_size = static_cast<int>(c.task.eval_size);
  t.min_digits = static_cast<int>(c.task.min_digits);
  t.max_digits = static_cast<int>(c.task.max_digits);
  t.operations = c.task.operations;
  t.subtraction = std::string(enum_name(c.task.subtraction));
  t.question_format = c.task.question_format;
  t.num_numbers = static_cast<int>(c.task.num_numbers);
  t.min_length = static_cast<int>(c.task.min_length);
  t.max_length = static_cast<int>(c.task.max_length);
  t.partial_credit = c.task.partial_credit;
  t.seed = static_cast<uint64_t>(c.task.seed);
  return t;
}

// The worker processes: trainer ranks, then rollout workers, all this binary, where `plan` puts them,
// reaching the orchestrator at `endpoint` with the run's keys. `resume_from`: the checkpoint the
// trainer ranks load first ("" = none).
std::vector<std::pair<ProcessSpec, WorkerSlot>> worker_specs(const Config& c, const std::string& dir,
                                                             const PlacementPlan& plan, const RunControlPlane& plane,
                                                             const std::string& endpoint,
                                                             const std::string& resume_from) {
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  const std::string config_path = (fs::path(dir) / "config.yaml").string();
  const std::vector<std::string> keys = control_key_flags(plane);
  std::vector<std::pair<ProcessSpec, WorkerSlot>> out;
  for (int r = 0; r < c.trainer_num_workers; ++r) {
    const std::string name = worker_name(Role::kTrainer, r);
    ProcessSpec p{name, {exe, "trainer", "--orchestrator", endpoint, "--rank", str(r), "--config", config_path,
                         "--timeline", timeline_path(dir, name)}, {}, str(dir, "/logs/", name, ".log"), "", {}};
    p.argv.insert(p.argv.end(), keys.begin(), keys.end());
    if (!resume_from.empty()) p.argv.insert(p.argv.end(), {"--resume-from", resume_from});
    place_worker(plan, c, Role::kTrainer, r, p);
    out.push_back({p, WorkerSlot{name, Role::kTrainer, r, p.log_path}});
  }
  for (int i = 0; i < c.inference_num_workers; ++i) {
    const std::string name = worker_name(Role::kRollout, i);
    ProcessSpec p{name, {exe, "rollout", "--orchestrator", endpoint, "--index", str(i), "--config", config_path,
                         "--weight-group-epoch", "0", "--timeline", timeline_path(dir, name)},
                  {}, str(dir, "/logs/", name, ".log"), "", {}};
    p.argv.insert(p.argv.end(), keys.begin(), keys.end());
    place_worker(plan, c, Role::kRollout, i, p);
    out.push_back({p, WorkerSlot{name, Role::kRollout, i, p.log_path}});
  }
  return out;
}

// /metrics on metrics_bind, and the registry the run's metrics go to. A bad or busy metrics_bind
// is the user's to fix before anything starts; an HTTP server that fails on a usable address
// must not cost the run: it goes on without /metrics (`server` stays null).
Result<std::shared_ptr<prometheus::Registry>> start_metrics(const Config& config, std::unique_ptr<MetricsServer>& server) {
  Result<std::unique_ptr<MetricsServer>> started = MetricsServer::start(config.metrics_bind);
  if (started.ok()) {
    server = std::move(*started);
    log::info(str("metrics on ", server->url()));
    return server->shared_registry();
  }
  if (started.status().code() != StatusCode::kInternal) return invalid_argument(started.status().message());
  log::error(str(started.status().message(), "; the run goes on without /metrics (metrics.jsonl and ",
                 "summary.json are still written)"));
  return std::make_shared<prometheus::Registry>();
}

// For the loop simulator: the nodes the processes run on, and the cores (or GPUs) of the first.
void set_cluster_shape(const Config& config, const PlacementPlan& plan, Orchestrator& orchestrator) {
  std::set<int> used;
  for (const Assignment& a : plan.trainers) used.insert(a.node);
  for (const Assignment& a : plan.rollout_servers) used.insert(a.node);
  const NodeResources& first = plan.nodes.at(static_cast<size_t>(*used.begin()));
  orchestrator.set_cluster_shape(static_cast<int64_t>(used.size()),
                                 config.backend == BackendKind::kCuda ? first.gpus : first.cpus);
}

// Tells the workers to exit, gives them a moment to do so on their own (they flush their
// timelines), then makes sure.
void stop_workers(Launcher& launcher, Orchestrator& orchestrator, bool finished) {
  orchestrator.shutdown_workers(finished ? "run finished" : "run stopped");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (launcher.live_count() > 0 && std::chrono::steady_clock::now() < deadline) {
    (void)launcher.poll_exits();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  launcher.stop_all(std::chrono::milliseconds(2000));
}

}  // namespace

Status run_processes(const Config& config, const std::optional<ResumePoint>& resume,
                     const std::atomic<int>& interrupted, RunOutcome& outcome) {
  const std::string& dir = config.run_dir;
  RLRUN_ASSIGN_OR_RETURN(LaunchTarget target, make_launch_target(config.launcher, this_machine(), slurm_environment(),
                                                                 *make_scontrol_queries()));
  RLRUN_ASSIGN_OR_RETURN(PlacementPlan plan, plan_placement(target.nodes, placement_request(config)));
  log::info(str("launcher: ", target.description));
  std::fprintf(stderr, "%s", plan.table().c_str());
  for (const std::string& w : plan.warnings) log::warn(w);
  RLRUN_ASSIGN_OR_RETURN(engine::Tokenizer tokenizer, tokenizer_from(config.model));
  RLRUN_ASSIGN_OR_RETURN(const PromptFormat format,
                         PromptFormat::create(config.task.chat_template, config.model.tokenizer, tokenizer));
  log::info(str("prompts: ", format.description(), " (task.chat_template: ", config.task.chat_template, ")"));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<Task> task, make_task(task_spec(config)));
  if (task->has_chat_rows() && !format.is_chat())
    return invalid_argument(str(config.task.dataset, ": rows with \"", config.task.messages_field,
                                "\" (task.messages_field) are chats, which need a chat template, but the prompts are ",
                                format.description(), " (task.chat_template: ", config.task.chat_template,
                                "); use a model with a chat template or set task.chat_template to a Jinja file"));
  RLRUN_ASSIGN_OR_RETURN(const RewardExpression reward_expression, parse_reward_expression(config.task.reward));
  RLRUN_ASSIGN_OR_RETURN(RewardFunction reward, RewardFunction::create(reward_expression, config.task, *task));
  std::unique_ptr<HttpRewardClient> http_reward;
  if (reward.uses_http()) {
    RLRUN_ASSIGN_OR_RETURN(http_reward, HttpRewardClient::create(http_reward_options(config.task)));
    log::info(str("rewards: ", config.task.reward, ", the http term from ", config.task.reward_url));
  }
  std::unique_ptr<MetricsServer> metrics_server;
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<prometheus::Registry> registry, start_metrics(config, metrics_server));
  const ControlAddress control = control_address(target, plan);
  RLRUN_ASSIGN_OR_RETURN(RunControlPlane plane, bind_run_control_plane(config, dir, control.bind_endpoint));
  ControlServer& server = *plane.server;

  std::vector<std::pair<ProcessSpec, WorkerSlot>> specs = worker_specs(
      config, dir, plan, plane, control.endpoint(server.port()), resume ? resume->dir : "");
  std::vector<WorkerSlot> slots;
  std::vector<std::string> rollout_names, processes;  // the orchestrator's own: process_memory_collectable
  for (const auto& [spec, slot] : specs) {
    slots.push_back(slot);
    slots.back().spec = spec;  // a replacement starts the same way
    processes.push_back(slot.name);
    if (slot.role == Role::kRollout) rollout_names.push_back(slot.name);
  }
  RunMetrics metrics(*registry, rollout_names, processes);
  metrics.max_async_rollout->Set(static_cast<double>(config.max_async_rollout));
  if (metrics_server) metrics_server->add_collectable(process_memory_collectable("orchestrator"));

  Launcher* launcher = target.launcher.get();
  Orchestrator orchestrator(config, server, *launcher, metrics, *task, tokenizer, format, reward, http_reward.get(), slots,
                            interrupted);
  if (resume) orchestrator.resume_from(resume->state, resume->dir);
  set_cluster_shape(config, plan, orchestrator);
  Status status;
  for (const auto& [spec, slot] : specs) {
    status = launcher->start(spec);
    if (!status.ok()) break;
  }
  if (status.ok()) {
    log::info(str("started ", specs.size(), " worker(s); logs in ", dir, "/logs/"));
    status = orchestrator.run();
  }
  stop_workers(*launcher, orchestrator, status.ok());
  outcome = orchestrator.finish();
  return status;
}


}  // namespace rlrun::orchestrator
