// report/run_folder.cc - reading a run folder for the report, a bad line at a time.
#include "orchestrator/report/run_folder.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

double number_or_missing(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : kMissing;
}

std::string string_or_empty(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// {"name": number, ...} with the non-numbers left out.
std::map<std::string, double> number_map(const Json& object, const char* key) {
  std::map<std::string, double> out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_object()) return out;
  for (const auto& [name, value] : it->items()) {
    if (value.is_number()) out[name] = value.get<double>();
  }
  return out;
}

// nlohmann's what() without its "[json.exception.parse_error.101] " prefix.
std::string json_error(const Json::exception& e) {
  const std::string what = e.what();
  const size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

void note_problem(InputFile* file, std::string problem) {
  ++file->skipped;
  if (file->first_problem.empty()) file->first_problem = std::move(problem);
}

// Calls `use` with each non-blank line's JSON object; a line that is not a JSON object, or
// that `use` refuses (returns a reason), is counted as skipped.
void read_json_lines(const fs::path& path, InputFile* file,
                     const std::function<std::string(const Json& line)>& use) {
  file->present = fs::exists(path);
  if (!file->present) return;
  std::ifstream in(path);
  if (!in) {
    note_problem(file, "cannot be read");
    return;
  }
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string why;
    try {
      const Json object = Json::parse(line);
      why = object.is_object() ? use(object) : "not a JSON object";
    } catch (const Json::exception& e) {
      why = "not JSON (" + json_error(e) + ")";
    }
    if (why.empty()) {
      ++file->used;
    } else {
      note_problem(file, str("line ", number, ": ", why));
    }
  }
}

// "" when the line is a step, else why not.
std::string read_step(const Json& line, std::map<int64_t, StepMetrics>* steps) {
  auto step = line.find("step");
  if (step == line.end() || !step->is_number_integer()) return "no integer \"step\"";
  StepMetrics m;
  m.step = step->get<int64_t>();
  m.reward_mean = number_or_missing(line, "reward_mean");
  m.reward_std = number_or_missing(line, "reward_std");
  m.wait_seconds = number_or_missing(line, "wait_seconds");
  m.train_seconds = number_or_missing(line, "train_seconds");
  m.weight_sync_seconds = number_or_missing(line, "weight_sync_seconds");
  m.tokens_trained = number_or_missing(line, "tokens_trained");
  m.tokens_generated_total = number_or_missing(line, "tokens_generated_total");
  m.async_level = number_or_missing(line, "async_level");
  const double accuracy = number_or_missing(line, "eval_accuracy");
  if (std::isfinite(accuracy)) m.eval_accuracy = accuracy;
  m.reward_terms = number_map(line, "reward_terms");
  m.reward_server_logs = number_map(line, "reward_server_logs");
  (*steps)[m.step] = std::move(m);  // a resumed run redoes steps: the later line wins
  return "";
}

using SampleGroups = std::map<std::pair<int64_t, std::string>, std::vector<SampleRecord>>;

std::string read_sample(const Json& line, size_t per_group, SampleGroups* groups) {
  auto step = line.find("step");
  if (step == line.end() || !step->is_number_integer()) return "no integer \"step\"";
  for (const char* key : {"kind", "prompt", "completion"}) {
    auto it = line.find(key);
    if (it == line.end() || !it->is_string()) return str("no string \"", key, "\"");
  }
  SampleRecord s;
  s.step = step->get<int64_t>();
  s.kind = line["kind"].get<std::string>();
  std::vector<SampleRecord>& group = (*groups)[{s.step, s.kind}];
  if (group.size() >= per_group) return "";  // valid, just not shown
  s.prompt = line["prompt"].get<std::string>();
  s.completion = line["completion"].get<std::string>();
  s.answer = string_or_empty(line, "answer");
  s.reward = number_or_missing(line, "reward");
  const double advantage = number_or_missing(line, "advantage");
  if (std::isfinite(advantage)) s.advantage = advantage;
  if (auto c = line.find("correct"); c != line.end() && c->is_boolean()) s.correct = c->get<bool>();
  group.push_back(std::move(s));
  return "";
}

// A whole file's text into `text`; a missing file is not a problem, an unreadable one is.
void read_whole(const fs::path& path, InputFile* file, std::string* text) {
  file->present = fs::exists(path);
  if (!file->present) return;
  Result<std::string> read = read_file(path.string(), file->name);
  if (!read.ok()) {
    note_problem(file, read.status().message());
    return;
  }
  *text = std::move(*read);
  ++file->used;
}

void read_summary(const fs::path& path, RunFolder* run) {
  std::string text;
  read_whole(path, &run->summary_file, &text);
  if (run->summary_file.used == 0) return;
  run->summary_file.used = 0;
  try {
    nlohmann::ordered_json summary = nlohmann::ordered_json::parse(text);
    if (!summary.is_object()) {
      note_problem(&run->summary_file, "not a JSON object");
      return;
    }
    run->summary = std::move(summary);
    run->summary_file.used = 1;
  } catch (const Json::exception& e) {
    note_problem(&run->summary_file, "not JSON (" + json_error(e) + ")");
  }
}

// "metrics.jsonl: missing" / "metrics.jsonl: 3 lines, none usable (line 1: ...)".
std::string why_unusable(const InputFile& f) {
  if (!f.present) return f.name + ": missing";
  if (f.skipped == 0) return f.name + ": empty";
  return str(f.name, ": nothing usable (", f.first_problem, ")");
}

}  // namespace

const nlohmann::ordered_json* find_summary_value(const RunFolder& run, std::initializer_list<const char*> path) {
  const nlohmann::ordered_json* at = &run.summary;
  for (const char* key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

double summary_number(const RunFolder& run, std::initializer_list<const char*> path) {
  const nlohmann::ordered_json* v = find_summary_value(run, path);
  return v != nullptr && v->is_number() ? v->get<double>() : kMissing;
}

Result<RunFolder> read_run_folder(const std::string& dir, size_t samples_per_group) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::exists(root, ec)) return not_found(str("run folder `", dir, "` does not exist"));
  if (!fs::is_directory(root, ec)) {
    return invalid_argument(str("`", dir, "` is not a folder: give the run folder (run_dir, or --run-dir of the run)"));
  }
  RunFolder run;
  run.dir = dir;
  run.metrics.name = "metrics.jsonl";
  run.summary_file.name = "summary.json";
  run.config.name = "config.yaml";
  run.samples_file.name = "samples.jsonl";

  std::map<int64_t, StepMetrics> steps;
  read_json_lines(root / "metrics.jsonl", &run.metrics, [&](const Json& line) { return read_step(line, &steps); });
  for (auto& [step, m] : steps) run.steps.push_back(std::move(m));
  read_summary(root / "summary.json", &run);
  read_whole(root / "config.yaml", &run.config, &run.config_yaml);

  SampleGroups groups;
  read_json_lines(root / "samples.jsonl", &run.samples_file,
                  [&](const Json& line) { return read_sample(line, samples_per_group, &groups); });
  run.sample_groups = static_cast<int64_t>(groups.size());
  for (auto& [key, records] : groups) {
    for (SampleRecord& s : records) run.samples.push_back(std::move(s));
  }

  if (run.steps.empty() && run.summary.is_null()) {
    return invalid_argument(str("`", dir, "` is not a run folder, or its run wrote nothing yet: ",
                                why_unusable(run.metrics), "; ", why_unusable(run.summary_file),
                                " (`rlrun CONFIG` writes both into its run_dir)"));
  }
  return run;
}

}  // namespace rlrun::orchestrator
