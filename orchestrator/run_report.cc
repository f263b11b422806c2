// run_report.cc - summary.json text.
#include "orchestrator/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/atomic_file.h"
#include "common/timeline.h"

namespace rlrun::orchestrator {

namespace {

std::string number(double v) { return std::isfinite(v) ? str(v) : "null"; }
std::string optional_number(const std::optional<double>& v) { return v ? number(*v) : "null"; }

// Mean of the first (or last) 10% of values, at least one value; null when there are none.
std::string tenth_mean(const std::vector<double>& v, bool last) {
  if (v.empty()) return "null";
  const size_t k = std::max<size_t>(1, (v.size() + 9) / 10);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += last ? v[v.size() - 1 - i] : v[i];
  return number(sum / static_cast<double>(k));
}

std::string quoted(const std::string& s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

}  // namespace

// "processes": one entry per worker (`role`, `rank`, resident `peak_memory_bytes`, and for
// trainers the backend's `backend_peak_bytes` and `phase_peak_bytes`), the keys `rlrun plan
// --compare` reads (orchestrator/memory_report.h).
static std::string processes_json(const RunOutcome& o) {
  std::string out;
  for (const auto& [process, rss] : o.peak_memory_bytes) {
    const size_t dash = process.rfind('-');
    if (dash == std::string::npos) continue;  // the orchestrator itself
    const std::string role = process.substr(0, dash);
    std::string entry = str("{\"role\": ", quoted(role), ", \"rank\": ", process.substr(dash + 1),
                            ", \"peak_memory_bytes\": ", rss);
    auto phases = o.phase_peak_bytes.find(process);
    if (phases != o.phase_peak_bytes.end() && !phases->second.empty()) {
      int64_t backend_peak = 0;
      std::string per_phase;
      for (const auto& [phase, n] : phases->second) {
        backend_peak = std::max(backend_peak, n);
        per_phase += str(per_phase.empty() ? "" : ", ", quoted(phase), ": ", n);
      }
      entry += str(", \"backend_peak_bytes\": ", backend_peak, ", \"phase_peak_bytes\": {", per_phase, "}");
    }
    out += str(out.empty() ? "" : ",\n    ", entry, "}");
  }
  return out;
}

// "worker_failures": one entry per rollout worker failure, times in Unix seconds (null: did not
// happen): when it was detected, when its replacement started, had the weights, took a request.
static std::string failures_json(const RunOutcome& o) {
  auto at = [](double t) {
    if (t <= 0) return std::string("null");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", t);  // milliseconds; str() would round to 6 digits
    return std::string(buf);
  };
  std::string out;
  for (const RunOutcome::WorkerFailure& f : o.worker_failures) {
    out += str(out.empty() ? "\n    " : ",\n    ", "{\"worker\": ", quoted(f.worker), ", \"reason\": ", quoted(f.reason),
               ", \"detected_at\": ", at(f.detected_at), ", \"replacement_started_at\": ", at(f.replacement_started_at),
               ", \"replacement_ready_at\": ", at(f.replacement_ready_at),
               ", \"replacement_first_request_at\": ", at(f.replacement_first_request_at), "}");
  }
  return out.empty() ? "[]" : str("[", out, "\n  ]");
}

std::string summary_json(const RunOutcome& o, double wall_seconds) {
  const SampleLedger::Summary& s = o.samples;
  std::string discarded;
  for (const auto& [reason, n] : s.discarded) discarded += str(discarded.empty() ? "" : ", ", quoted(reason), ": ", n);
  std::string memory;
  for (const auto& [process, n] : o.peak_memory_bytes) memory += str(memory.empty() ? "" : ", ", quoted(process), ": ", n);
  const double loop = o.loop_seconds > 0 ? o.loop_seconds : 0;
  return str("{\n  \"steps_completed\": ", o.steps_completed, ",\n  \"wall_seconds\": ", number(wall_seconds),
             ",\n  \"samples\": {\"generated\": ", s.generated, ", \"trained\": ", s.trained, ", \"discarded\": {",
             discarded, "}, \"cancelled\": ", s.cancelled, ", \"in_flight_at_exit\": ", s.in_flight,
             ", \"lost\": ", s.lost, ", \"anomalies\": ", s.anomalies, "},\n  \"reward_mean\": {\"first\": ", tenth_mean(o.step_reward_means, false),
             ", \"last\": ", tenth_mean(o.step_reward_means, true), "},\n  \"eval\": {\"accuracy_before\": ",
             optional_number(o.accuracy_before), ", \"accuracy_after\": ", optional_number(o.accuracy_after),
             o.accuracy_after_note.empty() ? "" : str(", \"accuracy_after_note\": ", quoted(o.accuracy_after_note)),
             "},\n  \"trainer_idle_fraction\": ", loop > 0 ? number(o.trainer_idle_seconds / loop) : "null",
             ",\n  \"rollout_idle_fraction\": ", loop > 0 ? number(o.rollout_idle_fraction) : "null",
             ",\n  \"tokens_per_second\": {\"generated\": ", loop > 0 ? number(o.tokens_generated / loop) : "null",
             ", \"trained\": ", loop > 0 ? number(o.tokens_trained / loop) : "null",
             "},\n  \"peak_memory_bytes\": {", memory, "},\n  \"processes\": [\n    ", processes_json(o),
             "\n  ],\n  \"worker_restarts\": ", o.worker_restarts, ",\n  \"worker_failures\": ", failures_json(o),
             ",\n  \"prompts_skipped\": ", o.prompts_skipped,
             ",\n  \"zero_spread_groups_kept\": ", o.zero_spread_kept, ",\n  \"exit\": ", quoted(o.exit), "\n}\n");
}

Status write_summary(const std::string& path, const RunOutcome& outcome, double wall_seconds) {
  return write_file_atomic(path, summary_json(outcome, wall_seconds));
}

}  // namespace rlrun::orchestrator
