// run/training/state.cc - ResumeState as JSON, and finding where a run resumes.
#include "orchestrator/run/training/state.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/observe/log.h"
#include "orchestrator/run/samples/dispatch_count.h"
#include "trainer/checkpoint.h"

namespace rlrun::orchestrator {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr int kStateFormat = 2;  // 2: samples.dispatched
}  // namespace

std::string resume_state_json(const ResumeState& s) {
  json j = {{"format", kStateFormat},
            {"steps_completed", s.steps_completed},
            {"task_draws", s.task_draws},
            {"next_group", s.next_group},
            {"next_request", s.next_request},
            {"prompts_skipped", s.prompts_skipped},
            {"tokens_generated", s.tokens_generated},
            {"tokens_trained", s.tokens_trained},
            {"step_reward_means", s.step_reward_means},
            {"accuracy_before", s.accuracy_before ? json(*s.accuracy_before) : json(nullptr)},
            {"loop_seconds", s.loop_seconds},
            {"trainer_idle_seconds", s.trainer_idle_seconds},
            {"rollout_idle_seconds", s.rollout_idle_seconds},
            {"samples",
             {{"dispatched", s.samples.dispatched},
              {"generated", s.samples.generated},
              {"trained", s.samples.trained},
              {"discarded", s.samples.discarded},
              {"cancelled", s.samples.cancelled}}}};
  // NaN rewards (an empty step) have no JSON form: they come back as null, read as NaN.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// j[key] as T; the error names `where` and the key.
template <class T>
Status read_field(const json& j, const char* key, T& out, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) return invalid_argument(str(where, ": orchestrator state has no `", key, "`"));
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    return invalid_argument(str(where, ": orchestrator state: `", key, "` is a ", it->type_name(),
                                ", not the type rlrun writes"));
  }
  return Status();
}

}  // namespace

Result<ResumeState> parse_resume_state(const std::string& text, const std::string& where) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(str(where, ": the orchestrator state is not a JSON object (a checkpoint written by "
                                       "the trainer library alone, not by `rlrun CONFIG`?)"));
  int format = 0;
  RLRUN_RETURN_IF_ERROR(read_field(j, "format", format, where));
  if (format != kStateFormat)
    return invalid_argument(str(where, ": orchestrator state format ", format, ", this rlrun reads ", kStateFormat));
  ResumeState s;
  RLRUN_RETURN_IF_ERROR(read_field(j, "steps_completed", s.steps_completed, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "task_draws", s.task_draws, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "next_group", s.next_group, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "next_request", s.next_request, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "prompts_skipped", s.prompts_skipped, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "tokens_generated", s.tokens_generated, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "tokens_trained", s.tokens_trained, where));
  json rewards, accuracy;
  RLRUN_RETURN_IF_ERROR(read_field(j, "step_reward_means", rewards, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "accuracy_before", accuracy, where));
  if (!rewards.is_array()) return invalid_argument(str(where, ": orchestrator state: `step_reward_means` is not a list"));
  for (const json& r : rewards) {
    if (!r.is_null() && !r.is_number())
      return invalid_argument(str(where, ": orchestrator state: `step_reward_means` holds a ", r.type_name()));
    s.step_reward_means.push_back(r.is_null() ? std::nan("") : r.get<double>());  // null: NaN (no JSON form)
  }
  if (!accuracy.is_null() && !accuracy.is_number())
    return invalid_argument(str(where, ": orchestrator state: `accuracy_before` is a ", accuracy.type_name()));
  if (accuracy.is_number()) s.accuracy_before = accuracy.get<double>();
  RLRUN_RETURN_IF_ERROR(read_field(j, "loop_seconds", s.loop_seconds, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "trainer_idle_seconds", s.trainer_idle_seconds, where));
  RLRUN_RETURN_IF_ERROR(read_field(j, "rollout_idle_seconds", s.rollout_idle_seconds, where));
  json samples;
  RLRUN_RETURN_IF_ERROR(read_field(j, "samples", samples, where));
  if (!samples.is_object()) return invalid_argument(str(where, ": orchestrator state: `samples` is not an object"));
  RLRUN_RETURN_IF_ERROR(read_field(samples, "dispatched", s.samples.dispatched, where));
  RLRUN_RETURN_IF_ERROR(read_field(samples, "generated", s.samples.generated, where));
  RLRUN_RETURN_IF_ERROR(read_field(samples, "trained", s.samples.trained, where));
  RLRUN_RETURN_IF_ERROR(read_field(samples, "discarded", s.samples.discarded, where));
  RLRUN_RETURN_IF_ERROR(read_field(samples, "cancelled", s.samples.cancelled, where));
  if (s.steps_completed < 0 || s.next_request == 0)
    return invalid_argument(str(where, ": orchestrator state: negative steps_completed or zero next_request"));
  return s;
}

SampleLedger::Summary add_samples(const SampleLedger::Summary& before, const SampleLedger::Summary& now) {
  SampleLedger::Summary s = now;
  s.dispatched += before.dispatched;
  s.generated += before.generated;
  s.trained += before.trained;
  s.cancelled += before.cancelled;
  s.anomalies += before.anomalies;
  for (const auto& [reason, n] : before.discarded) s.discarded[reason] += n;
  return s;
}

std::string checkpoint_root(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

SampleLedger::Summary samples_at_resume(const SampleLedger::Summary& at_checkpoint,
                                        std::optional<int64_t> dispatched_by_run) {
  SampleLedger::Summary s = at_checkpoint;
  const int64_t final_states = s.trained + s.discarded_total() + s.cancelled;
  // An older count (a machine crash lost the latest writes) or none: the checkpoint's own.
  s.dispatched = std::max({s.dispatched, dispatched_by_run.value_or(0), final_states});
  s.cancelled += s.dispatched - final_states;
  return s;
}

namespace {

// The checkpoint `dir` of the run, checked whole, with its ResumeState.
Result<ResumeState> usable_state(const std::string& dir) {
  RLRUN_RETURN_IF_ERROR(trainer::verify_checkpoint(dir));
  RLRUN_ASSIGN_OR_RETURN(trainer::CheckpointInfo info, trainer::read_checkpoint_info(dir));
  RLRUN_ASSIGN_OR_RETURN(ResumeState state, parse_resume_state(info.extras.loader_state, dir + "/trainer_state.json"));
  if (state.steps_completed != info.step)
    return invalid_argument(str(dir, "/trainer_state.json: the orchestrator state is of step ", state.steps_completed,
                                " but the checkpoint of step ", info.step));
  return state;
}

}  // namespace

Result<ResumePoint> find_resume_point(const std::string& run_dir) {
  if (!fs::is_directory(run_dir))
    return not_found(str("--resume: the run folder ", run_dir, " does not exist; give the folder of the run to "
                         "continue with --run-dir DIR (or run_dir), or start a new run without --resume"));
  const std::string root = checkpoint_root(run_dir);
  ResumePoint point;
  for (const std::string& dir : trainer::complete_checkpoints(root)) {
    Result<ResumeState> state = usable_state(dir);
    if (!state.ok()) {
      point.skipped.push_back({dir, state.status().message()});
      continue;
    }
    point.dir = dir;
    point.state = std::move(*state);
    break;
  }
  if (point.dir.empty() && point.skipped.empty())
    return not_found(str("--resume: no complete checkpoint under ", root, " (checkpoints are written with "
                         "checkpoint_every: N); start the run again without --resume"));
  if (point.dir.empty()) {
    std::string why;
    for (const ResumePoint::Skipped& s : point.skipped) why += str("\n  ", s.reason);
    return not_found(str("--resume: no usable checkpoint under ", root, ", every one failed its check:", why,
                         "\nstart the run again without --resume"));
  }
  Result<std::optional<int64_t>> dispatched = DispatchCount::read(dispatch_count_path(run_dir));
  if (!dispatched.ok()) point.dispatch_count_note = dispatched.status().message();
  const SampleLedger::Summary at_checkpoint = point.state.samples;
  point.state.samples = samples_at_resume(at_checkpoint, dispatched.ok() ? *dispatched : std::nullopt);
  point.cancelled_at_resume = point.state.samples.cancelled - at_checkpoint.cancelled;
  return point;
}

Status set_aside_skipped(const ResumePoint& point) {
  for (const ResumePoint::Skipped& s : point.skipped) {
    std::error_code ec;
    fs::rename(s.dir, s.dir + ".unusable", ec);
    if (ec) return io_error(str("cannot rename the unusable checkpoint ", s.dir, " to ", s.dir, ".unusable: ",
                                ec.message(), "; move or delete it, then resume again"));
  }
  return Status();
}

namespace {

Status truncate_one_metrics_file(const std::string& path, int64_t steps) {
  std::ifstream in(path);
  if (!in) return Status();
  std::string kept, line;
  while (std::getline(in, line)) {
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A torn last line (a crash mid-write) or a later step goes; anything else stays as it is.
    if (j.is_discarded()) continue;
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > steps)
      continue;
    kept += line + "\n";
  }
  return write_file_atomic(path, kept);
}

}  // namespace

Status truncate_metrics_jsonl(const std::string& path, int64_t steps) {
  RLRUN_RETURN_IF_ERROR(truncate_one_metrics_file(path + ".1", steps));  // rotated by log_files_max_mb
  return truncate_one_metrics_file(path, steps);
}

}  // namespace rlrun::orchestrator
