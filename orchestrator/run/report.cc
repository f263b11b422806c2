// run/report.cc - summary.json text.
#include "orchestrator/run/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"

namespace rlrun::orchestrator {

namespace {

using Json = nlohmann::ordered_json;  // keys in the order a person reads them

// null for a missing or non-finite value (JSON has no NaN).
Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }
Json optional_number(const std::optional<double>& v) { return v ? number(*v) : Json(nullptr); }
// A time in seconds since the run started, to the millisecond; null when it never happened (<= 0).
Json seconds_or_null(double t) { return t > 0 ? Json(std::round(t * 1000) / 1000) : Json(nullptr); }

// Mean of the first (or last) 10% of values, at least one value; null when there are none.
Json tenth_mean(const std::vector<double>& v, bool last) {
  if (v.empty()) return nullptr;
  const size_t k = std::max<size_t>(1, (v.size() + 9) / 10);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += last ? v[v.size() - 1 - i] : v[i];
  return number(sum / static_cast<double>(k));
}

// balance_cpu_threads: the threads each side started with and every change (null where the run
// does not balance: cpu_threads_per_worker set, a device backend, several nodes, or the key off).
Json cpu_threads_json(const RunOutcome& o) {
  const ThreadBalancer::Stats& t = o.threads;
  if (!t.base) return nullptr;
  Json changes = Json::array();
  for (const ThreadBalancer::Stats::Change& c : t.changes)
    changes.push_back({{"after_step", c.step}, {"trainer", c.share.trainer_threads},
                       {"rollout", c.share.rollout_threads}, {"reason", c.reason}});
  return {{"start", {{"trainer", t.base->trainer_threads}, {"rollout", t.base->rollout_threads}}},
          {"changes", changes}};
}

// "processes": one entry per worker (`role`, `rank`, resident `peak_memory_bytes`, and for
// trainers the backend's `backend_peak_bytes` and `phase_peak_bytes`), the keys `rlrun plan
// --compare` reads (orchestrator/plan/memory_report.h).
Json processes_json(const RunOutcome& o) {
  Json out = Json::array();
  for (const auto& [process, rss] : o.workers.peak_memory_bytes) {
    const size_t dash = process.rfind('-');
    if (dash == std::string::npos) continue;  // the orchestrator itself
    Json entry = {{"role", process.substr(0, dash)},
                  {"rank", std::stoll(process.substr(dash + 1))},
                  {"peak_memory_bytes", rss}};
    auto phases = o.workers.phase_peak_bytes.find(process);
    if (phases != o.workers.phase_peak_bytes.end() && !phases->second.empty()) {
      int64_t backend_peak = 0;
      Json per_phase = Json::object();
      for (const auto& [phase, n] : phases->second) {
        backend_peak = std::max(backend_peak, n);
        per_phase[phase] = n;
      }
      entry["backend_peak_bytes"] = backend_peak;
      entry["phase_peak_bytes"] = per_phase;
    }
    out.push_back(entry);
  }
  return out;
}

// "worker_failures": one entry per rollout worker failure, times in Unix seconds (null: did not
// happen): when it was detected, when its replacement started, had the weights, took a request.
Json failures_json(const RunOutcome& o) {
  Json out = Json::array();
  for (const WorkerFleet::Stats::Failure& f : o.workers.failures) {
    out.push_back({{"worker", f.worker},
                   {"reason", f.reason},
                   {"detected_at", seconds_or_null(f.detected_at)},
                   {"replacement_started_at", seconds_or_null(f.replacement_started_at)},
                   {"replacement_ready_at", seconds_or_null(f.replacement_ready_at)},
                   {"replacement_first_request_at", seconds_or_null(f.replacement_first_request_at)}});
  }
  return out;
}

Json trainer_failures_json(const RunOutcome& o) {
  Json out = Json::array();
  for (const TrainerGroup::Stats::Failure& f : o.trainers.failures) {
    out.push_back({{"worker", f.worker},
                   {"reason", f.reason},
                   {"step", f.step},
                   {"checkpoint", f.checkpoint.empty() ? Json(nullptr) : Json(f.checkpoint)},
                   {"restored_step", f.restored_step},
                   {"steps_redone", f.steps_redone},
                   {"steps_lost", f.steps_lost},
                   {"detected_at", seconds_or_null(f.detected_at)},
                   {"restart_started_at", seconds_or_null(f.restart_started_at)},
                   {"restart_ready_at", seconds_or_null(f.restart_ready_at)},
                   {"first_step_at", seconds_or_null(f.first_step_at)}});
  }
  return out;
}

Json checkpoint_failures_json(const RunOutcome& o) {
  Json out = Json::array();
  for (const CheckpointKeeper::Stats::Failure& f : o.checkpoints.failures) out.push_back({{"step", f.step}, {"error", f.error}});
  return out;
}

}  // namespace

std::string summary_json(const RunOutcome& o, double wall_seconds) {
  const SampleLedger::Summary& s = o.samples;
  const double loop = o.loop.loop_seconds > 0 ? o.loop.loop_seconds : 0;
  auto per_loop_second = [&](double v) { return loop > 0 ? number(v / loop) : Json(nullptr); };
  Json eval = {{"accuracy_before", optional_number(o.eval.accuracy_before)},
               {"accuracy_after", optional_number(o.eval.accuracy_after)}};
  if (!o.eval.accuracy_after_note.empty()) {
    eval["accuracy_after_note"] = o.eval.accuracy_after_note;
  } else if (o.eval.accuracy_before && !o.eval.accuracy_after) {
    eval["accuracy_after_note"] = "not measured: the run ended before its evaluation after training (see exit)";
  }
  const RewardStage::Stats& rewards = o.rewards;
  Json reward = {{"expression", rewards.expression}};
  if (rewards.server) {
    const HttpRewardClient::Stats& r = *rewards.server;
    reward["server"] = {{"url", rewards.url},
                        {"requests", r.requests},
                        {"failed_requests", r.failed_requests},
                        {"samples_scored", r.items_scored},
                        {"samples_retried", r.items_retried},
                        {"samples_waited", r.items_waited},
                        {"round_trip_median_seconds", number(r.round_trip_median_seconds)},
                        {"round_trip_max_seconds", number(r.round_trip_max_seconds)}};
  }
  Json episodes = nullptr;
  if (const EpisodeRunner::Stats& e = o.episodes; !e.url.empty()) {
    episodes = {{"environment_url", e.url},
                {"gateway", e.gateway},
                {"started", e.started},
                {"completed", e.completed},
                {"failed", e.failed},
                {"cancelled", e.cancelled},
                {"in_flight_at_exit", e.in_flight_at_exit},
                {"attempts", e.attempts},
                {"retried", e.retried},
                {"calls", e.calls},
                {"turns", e.turns},
                {"training_sequences", e.sequences},
                {"exact_turns", e.exact_turns},
                {"retokenized_differ", e.retokenized_differ},
                {"policy_tokens_trained", e.policy_tokens},
                {"environment_tokens_masked", e.environment_tokens},
                {"failures", Json(e.failures)}};
  }
  const Json summary = {
      {"steps_completed", o.steps_completed},
      {"wall_seconds", number(wall_seconds)},
      {"samples",
       {{"dispatched", s.dispatched},
        {"generated", s.generated},
        {"trained", s.trained},
        {"discarded", Json(s.discarded)},
        {"cancelled", s.cancelled},
        {"in_flight_at_exit", s.in_flight},
        {"lost", s.lost},
        {"anomalies", s.anomalies}}},
      {"reward_mean", {{"first", tenth_mean(o.step_reward_means, false)}, {"last", tenth_mean(o.step_reward_means, true)}}},
      {"eval", eval},
      {"reward", reward},
      {"episodes", episodes},
      {"trainer_idle_fraction", per_loop_second(o.loop.trainer_idle_seconds)},
      {"rollout_idle_fraction", loop > 0 ? number(o.rollout_idle_fraction) : Json(nullptr)},
      {"tokens_per_second",
       {{"generated", per_loop_second(static_cast<double>(o.tokens_generated))},
        {"trained", per_loop_second(static_cast<double>(o.tokens_trained))}}},
      {"peak_memory_bytes", Json(o.workers.peak_memory_bytes)},
      {"processes", processes_json(o)},
      {"worker_restarts", o.workers.restarts},
      {"worker_failures", failures_json(o)},
      {"trainer_restarts", o.trainers.restarts},
      {"trainer_failures", trainer_failures_json(o)},
      {"checkpoint_failures", checkpoint_failures_json(o)},
      {"prompts_skipped", o.prompts.prompts_skipped},
      {"zero_spread_groups_kept", rewards.zero_spread.kept},
      {"reward_collapse_step",
       rewards.zero_spread.reward_collapse_step > 0 ? Json(rewards.zero_spread.reward_collapse_step) : Json(nullptr)},
      {"kl_reference_groups",
       rewards.kl_reference_scored_by_rollout < 0
           ? Json(nullptr)
           : Json{{"scored_by_rollout", rewards.kl_reference_scored_by_rollout},
                  {"scored_by_trainer", rewards.kl_reference_scored_by_trainer}}},
      {"cpu_threads", cpu_threads_json(o)},
      {"tuning", o.loop.tuning},
      {"trainer_matmul", o.loop.trainer_matmul},
      {"model", o.checkpoints.model_dir.empty() ? Json(nullptr) : Json(o.checkpoints.model_dir)},
      {"exit", o.exit}};
  return summary.dump(2) + "\n";
}

Status write_summary(const std::string& path, const RunOutcome& outcome, double wall_seconds) {
  return write_file_atomic(path, summary_json(outcome, wall_seconds));
}

}  // namespace rlrun::orchestrator
