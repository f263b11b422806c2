// `rlrun [run] CONFIG`: the orchestrator process. Makes the run folder ready (a new one, or with
// --resume the one to continue), runs the run's processes (cli/run_processes.h) and always writes
// summary.json and timeline.json, whatever the end.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/config/config.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/cli/cli_args.h"
#include "orchestrator/cli/commands.h"
#include "orchestrator/cli/run_processes.h"
#include "orchestrator/plan/memory_advice.h"
#include "orchestrator/roles/compute_backend.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/report.h"
#include "orchestrator/run/training/state.h"

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
  if (fs::exists(fs::path(dir) / "summary.json")) dir.append("-").append(timestamp());
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

// Prints `s` as rlrun's error and gives `exit_code` for it.
int fail(const Status& s, int exit_code) {
  std::fprintf(stderr, "rlrun: %s\n", s.message().c_str());
  return exit_code;
}

// Where a run that continues from a checkpoint stands, in the log.
void log_resume(const Config& config, const ResumePoint& resume) {
  log::info(str("resuming from ", resume.dir, " (", resume.state.steps_completed, " of ", config.number_of_steps,
                " steps done)"));
  if (!resume.dispatch_count_note.empty())
    log::warn(str(resume.dispatch_count_note, ": samples dispatched after the checkpoint by the stopped run ",
                  "are not counted"));
  if (resume.cancelled_at_resume > 0)
    log::info(str(resume.cancelled_at_resume, " samples in flight at the checkpoint or dispatched after it count "
                  "as cancelled (the steps after it are trained again)"));
}

// The run folder made ready: chosen (or, with --resume, the one to continue, its metrics.jsonl
// trimmed to the checkpoint and unusable checkpoints set aside), made absolute in config.run_dir,
// the effective config written, the orchestrator's log opened. Returns kExitOk or the exit code.
int prepare_run_folder(Config& config, const ConfigArgs& args, std::optional<ResumePoint>& resume) {
  const bool resuming = args.has("--resume");
  Result<std::string> dir = resuming ? resume_run_dir(config, args.value("--run-dir"))
                                     : make_run_dir(config, args.value("--run-dir"));
  if (!dir.ok()) return fail(dir.status(), kExitUsage);
  // Absolute, as every path in the effective config: workers read it from inside the run folder.
  config.run_dir = fs::absolute(*dir).lexically_normal().string();
  if (resuming) {
    Result<ResumePoint> point = find_resume_point(config.run_dir);
    if (!point.ok()) return fail(point.status(), kExitUsage);
    resume = std::move(*point);
    // Lines of steps after the checkpoint describe work the resumed run redoes.
    const std::string metrics_jsonl = (fs::path(config.run_dir) / "metrics.jsonl").string();
    if (Status s = truncate_metrics_jsonl(metrics_jsonl, resume->state.steps_completed); !s.ok())
      return fail(s, kExitFailed);
  }
  Result<std::string> effective = render_effective_config(config);
  if (!effective.ok()) return report_config_errors("run", effective.status());
  const Status written = write_file_atomic((fs::path(config.run_dir) / "config.yaml").string(), *effective);
  if (!written.ok()) return fail(written, kExitFailed);
  // Every line of this process (and every step's progress line) also goes to logs/orchestrator.log.
  if (!log::set_file((fs::path(config.run_dir) / "logs" / "orchestrator.log").string(), config.log_files_max_mb << 20))
    log::warn(str("cannot write ", config.run_dir, "/logs/orchestrator.log; the log goes to stderr only"));
  const Result<engine::ModelConfig> model = model_config_from(config.model);
  if (!model.ok()) return report_config_errors("run", model.status());
  log::info(str("model: ", engine::describe_model(*model)));
  log::info(describe_compute_dtype(config));
  log::info(str("run folder ", config.run_dir));
  if (!resume) return kExitOk;
  for (const ResumePoint::Skipped& skipped : resume->skipped)
    log::warn(str("--resume: not using ", skipped.dir, ": ", skipped.reason, "; it is kept as ", skipped.dir,
                  ".unusable, and the run falls back to the previous complete checkpoint"));
  if (Status s = set_aside_skipped(*resume); !s.ok()) return fail(s, kExitFailed);
  log_resume(config, *resume);
  return kExitOk;
}

// Every process's timeline (those of the processes it replaced, and the older part of one rotated by
// timeline_max_mb, first) merged into timeline.json; a process that never started has none.
void merge_run_timelines(const Config& config) {
  std::vector<std::string> timelines;
  for (int r = -1; r < config.trainer_num_workers + config.inference_num_workers; ++r) {
    const std::string name = r < 0                             ? std::string("orchestrator")
                             : r < config.trainer_num_workers ? worker_name(Role::kTrainer, r)
                                                               : worker_name(Role::kRollout, r - config.trainer_num_workers);
    for (std::string& file : timeline_files(config.run_dir, name)) timelines.push_back(std::move(file));
  }
  if (Status s = merge_timelines(timelines, (fs::path(config.run_dir) / "timeline.json").string()); !s.ok())
    log::warn(s.message());
}

// After the run, whatever its end: summary.json, timeline.json, the last lines, the exit code.
int finish_run(const Config& config, const Status& status, RunOutcome& outcome, double wall_seconds) {
  const bool interrupted = g_interrupted.load() > 0;
  if (interrupted) outcome.exit = "interrupted";
  else if (!status.ok()) outcome.exit = status.message();
  if (!status.ok()) log::error(str("run ", interrupted ? "interrupted" : "failed", ": ", status.message()));
  const std::string summary = (fs::path(config.run_dir) / "summary.json").string();
  if (Status s = write_summary(summary, outcome, wall_seconds); !s.ok()) log::error(s.message());
  global_timeline().close();
  merge_run_timelines(config);
  if (outcome.eval.accuracy_before && outcome.eval.accuracy_after)
    log::info(str("held-out accuracy: ", *outcome.eval.accuracy_before, " before RL -> ", *outcome.eval.accuracy_after,
                  " after ", outcome.steps_completed, " RL steps"));
  log::info(str("summary: ", summary, " (", outcome.steps_completed, " steps in ", wall_seconds, " s, exit: ",
                outcome.exit, ")"));
  if (status.ok()) return kExitOk;
  const bool usage = status.code() == StatusCode::kInvalidArgument;
  return usage && outcome.steps_completed == 0 ? kExitUsage : kExitFailed;
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
  if (Status fits = check_plan_fits(config); !fits.ok()) return fail(fits, kExitPlanDoesNotFit);
  std::optional<ResumePoint> resume;
  if (const int code = prepare_run_folder(config, *parsed, resume); code != kExitOk) return code;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (Status s = global_timeline().open(timeline_path(config.run_dir, "orchestrator"), "orchestrator"); !s.ok())
    log::warn(s.message());
  global_timeline().set_rotate_bytes(config.timeline_max_mb << 20);

  RunOutcome outcome;
  const Status status = run_processes(config, resume, g_interrupted, outcome);
  return finish_run(config, status, outcome, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace rlrun::orchestrator
