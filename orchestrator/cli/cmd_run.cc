// `rlrun [run] CONFIG`: the orchestrator process. Sets up the run (folder, placement, metrics,
// control plane, workers), runs the data loop (run/orchestrator.h) and always writes summary.json.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <set>
#include <thread>

#include "common/atomic_file.h"
#include "common/config/config.h"
#include "common/observe/log.h"
#include "common/observe/metrics.h"
#include "common/observe/timeline.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/cli/commands.h"
#include "orchestrator/launch/launch_target.h"
#include "orchestrator/launch/placement.h"
#include "orchestrator/plan/memory_advice.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/orchestrator.h"
#include "orchestrator/run/report.h"
#include "orchestrator/run/training/state.h"
#include "orchestrator/run/workers/control_plane.h"

namespace rlrun::orchestrator {

namespace {

namespace fs = std::filesystem;

std::atomic<int> g_interrupted{0};
// SIGINT/SIGTERM: the first stops the run cleanly (the step in training completes, then a
// checkpoint with checkpoint_every); the second stops it at once, still writing summary.json; a
// third ends the orchestrator on the spot (its workers die with it: PDEATHSIG).
void on_signal(int sig) {
  if (g_interrupted.fetch_add(1) < 2) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// The run folder: --run-dir, else run_dir (its built-in default means runs/<timestamp>). A folder
// that already holds a finished run is not overwritten: the new run goes beside it.
Result<std::string> make_run_dir(const Config& config, const std::string& flag) {
  std::string dir = !flag.empty() ? flag : config.run_dir;
  if (flag.empty() && config.run_dir == Config{}.run_dir) dir = "runs/" + timestamp();
  if (fs::exists(fs::path(dir) / "summary.json")) dir += "-" + timestamp();
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "logs", ec);
  if (ec) return io_error(str("cannot create the run folder ", dir, ": ", ec.message(), " (set run_dir or --run-dir)"));
  return dir;
}

// --resume: the same run folder (--run-dir, else run_dir), never a new one.
Result<std::string> resume_run_dir(const Config& config, const std::string& flag) {
  if (!flag.empty()) return flag;
  if (config.run_dir == Config{}.run_dir)
    return invalid_argument("--resume needs the run folder: give --run-dir DIR (or set run_dir in the config)");
  return config.run_dir;
}

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

// Everything after the config is loaded; fills `outcome` whatever happens. `resume`: the
// checkpoint the run continues from.
Status run(const Config& config, const std::string& dir, const std::optional<ResumePoint>& resume,
           RunOutcome& outcome) {
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
  // A bad or busy metrics_bind is the user's to fix before anything starts; an HTTP server that
  // fails on a usable address must not cost the run: it goes on without /metrics.
  Result<std::unique_ptr<MetricsServer>> metrics_server = MetricsServer::start(config.metrics_bind);
  std::shared_ptr<prometheus::Registry> registry;
  if (metrics_server.ok()) {
    registry = (*metrics_server)->shared_registry();
    log::info(str("metrics on ", (*metrics_server)->url()));
  } else if (metrics_server.status().code() == StatusCode::kInternal) {
    log::error(str(metrics_server.status().message(), "; the run goes on without /metrics (metrics.jsonl and ",
                   "summary.json are still written)"));
    registry = std::make_shared<prometheus::Registry>();
  } else {
    return invalid_argument(metrics_server.status().message());
  }
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
  if (metrics_server.ok()) (*metrics_server)->add_collectable(process_memory_collectable("orchestrator"));

  Launcher* launcher = target.launcher.get();
  Orchestrator orchestrator(config, server, *launcher, metrics, *task, tokenizer, format, reward, http_reward.get(), slots,
                            g_interrupted);
  if (resume) orchestrator.resume_from(resume->state, resume->dir);
  {  // for the loop simulator: the nodes the processes run on, and the cores (or GPUs) of the first
    std::set<int> used;
    for (const Assignment& a : plan.trainers) used.insert(a.node);
    for (const Assignment& a : plan.rollout_servers) used.insert(a.node);
    const NodeResources& first = plan.nodes.at(static_cast<size_t>(*used.begin()));
    orchestrator.set_cluster_shape(static_cast<int64_t>(used.size()),
                                   config.backend == BackendKind::kCuda ? first.gpus : first.cpus);
  }
  Status status;
  for (const auto& [spec, slot] : specs) {
    status = launcher->start(spec);
    if (!status.ok()) break;
  }
  if (status.ok()) {
    log::info(str("started ", specs.size(), " worker(s); logs in ", dir, "/logs/"));
    status = orchestrator.run();
  }
  orchestrator.shutdown_workers(status.ok() ? "run finished" : "run stopped");
  // Give workers a moment to exit on their own (they flush their timelines), then make sure.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (launcher->live_count() > 0 && std::chrono::steady_clock::now() < deadline) {
    (void)launcher->poll_exits();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  launcher->stop_all(std::chrono::milliseconds(2000));
  outcome = orchestrator.finish();
  return status;
}

}  // namespace

int cmd_run(const Args& args) {
  const auto start = std::chrono::steady_clock::now();
  static constexpr FlagSpec kFlags[] = {{"--run-dir", true}, {"--resume", false}};
  Result<ConfigArgs> parsed = parse_config_args(args, kFlags);
  if (!parsed.ok()) return report_usage_error("run", parsed.status());
  if (parsed->config_path.empty()) return report_usage_error("run", invalid_argument("missing CONFIG; see --help"));
  Result<Config> loaded = load_config(parsed->config_path, parsed->overrides);
  if (!loaded.ok()) return report_config_errors("run", loaded.status());
  Config config = *loaded;
  log::set_min_level(config.log_level);
  log::set_process_name("orchestrator");
  // A run whose memory plan cannot fit is refused before anything starts, with the levers.
  if (Status fits = check_plan_fits(config); !fits.ok()) {
    std::fprintf(stderr, "rlrun: %s\n", fits.message().c_str());
    return kExitPlanDoesNotFit;
  }
  const bool resuming = parsed->has("--resume");
  Result<std::string> dir = resuming ? resume_run_dir(config, parsed->value("--run-dir"))
                                     : make_run_dir(config, parsed->value("--run-dir"));
  if (!dir.ok()) return std::fprintf(stderr, "rlrun: %s\n", dir.status().message().c_str()), kExitUsage;
  // Absolute, as every path in the effective config: workers read it from inside the run folder.
  *dir = fs::absolute(*dir).lexically_normal().string();
  config.run_dir = *dir;
  std::optional<ResumePoint> resume;
  if (resuming) {
    Result<ResumePoint> point = find_resume_point(*dir);
    if (!point.ok()) return std::fprintf(stderr, "rlrun: %s\n", point.status().message().c_str()), kExitUsage;
    resume = std::move(*point);
    // Lines of steps after the checkpoint describe work the resumed run redoes.
    const std::string metrics_jsonl = (fs::path(*dir) / "metrics.jsonl").string();
    if (Status s = truncate_metrics_jsonl(metrics_jsonl, resume->state.steps_completed); !s.ok())
      return std::fprintf(stderr, "rlrun: %s\n", s.message().c_str()), kExitFailed;
  }
  Result<std::string> effective = render_effective_config(config);
  if (!effective.ok()) return report_config_errors("run", effective.status());
  const Status written = write_file_atomic((fs::path(*dir) / "config.yaml").string(), *effective);
  if (!written.ok()) return std::fprintf(stderr, "rlrun: %s\n", written.message().c_str()), kExitFailed;
  // Every line of this process (and every step's progress line) also goes to logs/orchestrator.log.
  if (!log::set_file((fs::path(*dir) / "logs" / "orchestrator.log").string(), config.log_files_max_mb << 20))
    log::warn(str("cannot write ", *dir, "/logs/orchestrator.log; the log goes to stderr only"));
  log::info(str("run folder ", *dir));
  if (resume) {
    for (const ResumePoint::Skipped& skipped : resume->skipped)
      log::warn(str("--resume: not using ", skipped.dir, ": ", skipped.reason, "; it is kept as ", skipped.dir,
                    ".unusable, and the run falls back to the previous complete checkpoint"));
    if (Status s = set_aside_skipped(*resume); !s.ok())
      return std::fprintf(stderr, "rlrun: %s\n", s.message().c_str()), kExitFailed;
    log::info(str("resuming from ", resume->dir, " (", resume->state.steps_completed, " of ", config.number_of_steps,
                  " steps done)"));
    if (!resume->dispatch_count_note.empty())
      log::warn(str(resume->dispatch_count_note, ": samples dispatched after the checkpoint by the stopped run ",
                    "are not counted"));
    if (resume->cancelled_at_resume > 0)
      log::info(str(resume->cancelled_at_resume, " samples in flight at the checkpoint or dispatched after it count "
                    "as cancelled (the steps after it are trained again)"));
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const std::string own_timeline = timeline_path(*dir, "orchestrator");
  if (Status s = global_timeline().open(own_timeline, "orchestrator"); !s.ok()) log::warn(s.message());
  global_timeline().set_rotate_bytes(config.timeline_max_mb << 20);

  RunOutcome outcome;
  const Status status = run(config, *dir, resume, outcome);
  const bool usage = status.code() == StatusCode::kInvalidArgument;
  if (g_interrupted.load() > 0) {
    outcome.exit = "interrupted";
  } else if (!status.ok()) {
    outcome.exit = status.message();
  }
  if (!status.ok()) log::error(str("run ", g_interrupted.load() > 0 ? "interrupted" : "failed", ": ", status.message()));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string summary = (fs::path(*dir) / "summary.json").string();
  if (Status s = write_summary(summary, outcome, wall); !s.ok()) log::error(s.message());
  global_timeline().close();
  std::vector<std::string> timelines;
  for (int r = -1; r < config.trainer_num_workers + config.inference_num_workers; ++r) {
    const std::string name = r < 0                             ? std::string("orchestrator")
                             : r < config.trainer_num_workers ? worker_name(Role::kTrainer, r)
                                                               : worker_name(Role::kRollout, r - config.trainer_num_workers);
    const std::string path = timeline_path(*dir, name);
    // timeline_max_mb: the older part of a long process's timeline, if it was rotated
    if (fs::exists(rotated_timeline_path(path))) timelines.push_back(rotated_timeline_path(path));
    if (fs::exists(path)) timelines.push_back(path);  // absent when the run stopped before it started
  }
  if (Status s = merge_timelines(timelines, (fs::path(*dir) / "timeline.json").string()); !s.ok()) log::warn(s.message());
  if (outcome.eval.accuracy_before && outcome.eval.accuracy_after)
    log::info(str("held-out accuracy: ", *outcome.eval.accuracy_before, " before RL -> ", *outcome.eval.accuracy_after, " after ",
                  outcome.steps_completed, " RL steps"));
  log::info(str("summary: ", summary, " (", outcome.steps_completed, " steps in ", wall, " s, exit: ", outcome.exit, ")"));
  if (status.ok()) return kExitOk;
  return usage && outcome.steps_completed == 0 ? kExitUsage : kExitFailed;
}

}  // namespace rlrun::orchestrator
