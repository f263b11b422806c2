// report/run_folder.h - what `rlrun report` reads from a run folder, leniently: the files are the
// run's own output, but they may be cut short (a killed run), hand-edited or from another
// version, so a bad line is skipped and counted, a missing key is a missing value, and only a
// folder with nothing usable at all is an error.
//
// The files (written by orchestrator/run/): metrics.jsonl (one JSON object per trainer step,
// Orchestrator::write_step_line), summary.json (run/report.cc), config.yaml (the effective
// config) and, when the run wrote it, samples.jsonl (one sampled completion per line:
// {"step", "kind": "eval"|"train", "prompt", "completion", "answer", "reward", "advantage",
// "correct"}).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::orchestrator {

inline constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

// One line of metrics.jsonl. A value the line lacks (or holds as null or a non-number) is
// kMissing (NaN: charts leave a gap).
struct StepMetrics {
  int64_t step = 0;
  double reward_mean = kMissing, reward_std = kMissing;
  double wait_seconds = kMissing, train_seconds = kMissing, weight_sync_seconds = kMissing;  // s, the step split
  double tokens_trained = kMissing;          // this step's trained tokens
  double tokens_generated_total = kMissing;  // generated since the run began (a running total)
  double async_level = kMissing;
  std::optional<double> eval_accuracy;               // on evaluation steps only
  std::map<std::string, double> reward_terms;        // task.reward term -> mean over the step's samples
  std::map<std::string, double> reward_server_logs;  // reward server extra_logs name -> mean
};

// One line of samples.jsonl. An absent reward is kMissing; an absent answer is "".
struct SampleRecord {
  int64_t step = 0;
  std::string kind;  // "eval" | "train" (or whatever the line says)
  std::string prompt, completion, answer;
  double reward = kMissing;
  std::optional<double> advantage;
  std::optional<bool> correct;
};

// How one input file went: whether it was there, how many records were used and skipped, and
// the first problem met (shown in the report so a user knows what is missing and why).
struct InputFile {
  std::string name;  // "metrics.jsonl"
  bool present = false;
  int64_t used = 0;     // lines used (1 for a whole-file JSON or YAML)
  int64_t skipped = 0;  // malformed lines (or 1 for an unreadable whole file)
  std::string first_problem;  // "line 7: not JSON (...)"; "" when none
};

struct RunFolder {
  std::string dir;
  std::vector<StepMetrics> steps;  // ascending step; for a step written twice, the later line
  nlohmann::ordered_json summary;  // summary.json's object, keys in file order; null when missing or unreadable
  std::string config_yaml;         // config.yaml's text; "" when missing
  // samples.jsonl: at most `samples_per_group` records per (step, kind), by step then kind, then
  // file order; sample_groups counts every (step, kind) seen.
  std::vector<SampleRecord> samples;
  int64_t sample_groups = 0;
  InputFile metrics, summary_file, config, samples_file;
};

// summary.json's value at a path of keys ({"eval", "accuracy_after"}); nullptr when a part is
// missing or not an object. summary_number: that value as a number, else kMissing.
const nlohmann::ordered_json* find_summary_value(const RunFolder& run, std::initializer_list<const char*> path);
double summary_number(const RunFolder& run, std::initializer_list<const char*> path);

// Reads `dir`. Errors: kNotFound when `dir` does not exist, kInvalidArgument when it is not a
// folder or holds neither a usable metrics.jsonl nor a usable summary.json (the message names
// the folder and what each file lacked).
Result<RunFolder> read_run_folder(const std::string& dir, size_t samples_per_group);

}  // namespace rlrun::orchestrator
