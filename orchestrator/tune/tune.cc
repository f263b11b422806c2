#include "orchestrator/tune/tune.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/observe/log.h"
#include "rollout/scheduler.h"

namespace rlrun::orchestrator::tune {
namespace {

using Json = nlohmann::ordered_json;

Json settings_json(const LoopSettings& s) {
  return {{"inference_num_workers", s.inference_num_workers},
          {"trainer_num_workers", s.trainer_num_workers},
          {"max_async_rollout", s.max_async_rollout},
          {"number_of_minibatches", s.number_of_minibatches},
          {"prompts_batch_size_for_trainer", s.prompts_batch_size_for_trainer},
          {"max_concurrent_prompts_per_server", s.max_concurrent_prompts_per_server},
          {"kl_reference_on", s.reference_on_rollout ? "rollout" : "trainer"}};
}

Json candidate_json(const Candidate& c) {
  Json j = {{"settings", settings_json(c.settings)}};
  if (!c.prediction.feasible) {
    j["infeasible"] = c.prediction.reason;
    return j;
  }
  j["seconds_per_step"] = c.prediction.seconds_per_step;
  j["trainer_idle_fraction"] = c.prediction.trainer_idle_fraction;
  j["rollout_idle_fraction"] = c.prediction.rollout_idle_fraction;
  j["mean_staleness"] = c.prediction.mean_staleness;
  j["threads"] = {{"trainer", c.prediction.trainer_threads}, {"rollout", c.prediction.rollout_threads}};
  return j;
}

std::string row(const char* mark, const Candidate& c) {
  const LoopSettings& s = c.settings;
  char line[200];
  if (!c.prediction.feasible)
    return str(mark, " cannot run: ", c.prediction.reason, "\n");
  std::snprintf(line, sizeof line, "%-2s %8lld %8lld %6lld %6lld %10.3f %8.0f%% %8.0f%%", mark,
                static_cast<long long>(s.inference_num_workers), static_cast<long long>(s.trainer_num_workers),
                static_cast<long long>(s.max_async_rollout), static_cast<long long>(s.max_concurrent_prompts_per_server),
                c.prediction.seconds_per_step, 100 * c.prediction.trainer_idle_fraction,
                100 * c.prediction.rollout_idle_fraction);
  if (!s.kl_reference) return str(line, "\n");
  return str(line, s.reference_on_rollout ? "   rollout\n" : "   trainer\n");
}

bool same(const LoopSettings& a, const LoopSettings& b) { return describe_change(a, b).empty(); }

Result<double> positive_number(std::string_view key, std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v <= 0)
    return invalid_argument(str("--cluster: ", key, "=", text, " is not a positive number"));
  return v;
}

}  // namespace

LoopSettings settings_from(const Config& c) {
  LoopSettings s;
  s.inference_num_workers = c.inference_num_workers;
  s.trainer_num_workers = c.trainer_num_workers;
  s.max_async_rollout = c.max_async_rollout;
  s.number_of_minibatches = c.number_of_minibatches;
  s.prompts_batch_size_for_trainer = c.prompts_batch_size_for_trainer;
  s.max_concurrent_prompts_per_server = c.max_concurrent_prompts_per_server;
  s.group_size = c.group_size;
  s.max_num_seqs = c.max_num_seqs;
  s.max_prefill_tokens = rollout::SchedulerOptions{}.max_prefill_tokens;
  s.cpu_threads_per_worker = c.cpu_threads_per_worker;
  s.individual_sample_lanes = c.enable_individual_sample_lanes;
  s.share_prompts_in_training = c.share_prompts_in_training;
  s.kl_reference = c.kl_coef > 0;
  s.reference_on_rollout = c.kl_reference_on == KlReferenceOn::kRollout;
  s.reference_stays_on_trainer = c.lora_rank > 0;
  s.balance_cpu_threads = c.balance_cpu_threads;
  s.rollout_cpu_nice = c.backend == BackendKind::kCpu ? c.rollout_cpu_nice : 0;  // applied when max_async_rollout > 0
  return s;
}

Cluster cluster_from(const LoopProfile& profile) {
  Cluster c;
  c.nodes = std::max<int64_t>(1, profile.nodes);
  c.slots_per_node = std::max<int64_t>(1, profile.slots_per_node);
  c.devices = profile.on_devices;
  // CPU processes move gradients over the same loopback transport as the weights, sharing the
  // same cores: the weight sync's measured rate (the f32 weights to one receiver, its fixed costs
  // included) stands for the all-reduce's, well below what the wire alone would do.
  const LoopProfile::TrainSums& t = profile.train();
  if (!c.devices && t.steps > 0 && t.sync_seconds > 0 && profile.parameters > 0) {
    const double per_receiver = t.sync_seconds / static_cast<double>(t.steps) /
                                static_cast<double>(std::max<int64_t>(1, profile.rollout_workers));
    c.allreduce_bytes_per_second = 4.0 * static_cast<double>(profile.parameters) / per_receiver;
  }
  return c;
}

Result<Cluster> parse_cluster(std::string_view spec, Cluster base) {
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view part = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos)
      return invalid_argument(str("--cluster: \"", part, "\" is not key=value (e.g. nodes=8,gpus_per_node=8)"));
    const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    RLRUN_ASSIGN_OR_RETURN(double v, positive_number(key, value));
    const bool whole = v == std::floor(v) && v < 1e9;
    if (key == "nodes" && whole) {
      base.nodes = static_cast<int64_t>(v);
    } else if ((key == "gpus_per_node" || key == "cores_per_node") && whole) {
      base.slots_per_node = static_cast<int64_t>(v);
      base.devices = key == "gpus_per_node";
    } else if (key == "generation_speed") {
      base.generation_speed = v;
    } else if (key == "training_speed") {
      base.training_speed = v;
    } else if (key == "allreduce_gbps") {
      base.allreduce_bytes_per_second = v * 1e9 / 8;
    } else {
      return invalid_argument(str("--cluster: ", key, "=", value, " is not understood: use nodes, gpus_per_node or ",
                                  "cores_per_node (whole numbers), generation_speed, training_speed, allreduce_gbps"));
    }
  }
  return base;
}

SimOptions sim_options(int64_t number_of_steps, uint64_t seed) {
  return {std::clamp<int64_t>(number_of_steps, 20, 400), seed};
}

std::string render_advice(const Advice& advice, size_t rows) {
  const bool kl = advice.current.settings.kl_reference;
  std::string out = str("predicted seconds per RL step and idle fractions (", advice.current.prediction.steps,
                        " simulated steps)\n", "   rollouts trainers async  lanes     s/step  trainer   rollout",
                        kl ? "  KL ref\n" : "\n");
  out += row("*", advice.current);
  size_t shown = 0;
  for (const Candidate& c : advice.candidates) {
    if (shown == rows) break;
    if (same(c.settings, advice.current.settings)) continue;
    out += row(same(c.settings, advice.recommended.settings) ? ">" : "", c);
    ++shown;
  }
  out += str("(* the given settings; > the recommended; async = max_async_rollout; lanes = max_concurrent_prompts_per_server",
             kl ? "; KL ref = kl_reference_on)\n" : ")\n");
  const std::string line = advice_line(advice);
  out += line.empty() ? str("recommended: keep these settings (nothing is predicted ", static_cast<int>((kMinGain - 1) * 100),
                            "% faster)\n")
                      : line + "\n";
  return out;
}

Json advice_json(const Advice& advice, bool given) {
  Json j;
  j["prediction"] = candidate_json(given ? advice.current : advice.recommended);
  j["current"] = candidate_json(advice.current);
  j["recommended"] = candidate_json(advice.recommended);
  j["change"] = describe_change(advice.current.settings, advice.recommended.settings);
  Json list = Json::array();
  for (const Candidate& c : advice.candidates) list.push_back(candidate_json(c));
  j["candidates"] = std::move(list);
  return j;
}

std::string describe_costs(const LoopCosts& c) {
  double samples = 0, tokens = 0;
  for (const auto& [len, n] : c.completion_tokens) {
    samples += static_cast<double>(n);
    tokens += static_cast<double>(len * n);
  }
  char text[600];
  std::snprintf(text, sizeof text,
                "costs measured (%s, %lld thread(s) per process): rollout engine step %.2f ms + %.3f ms per sequence + "
                "%.1f us per prompt token + %.2f us per context token; training %.2f ms per 1k tokens + %.1f ms per "
                "optimizer step + %.1f ms per step; weight sync %.1f ms; prompts %.0f tokens, completions %.1f tokens; "
                "%.0f%% of groups discarded\n",
                c.on_devices ? "device seconds" : "CPU seconds", static_cast<long long>(c.threads),
                1e3 * c.engine_step.fixed, 1e3 * c.engine_step.per_sequence, 1e6 * c.engine_step.per_prefill_token,
                1e6 * c.engine_step.per_context_token, 1e6 * c.train_seconds_per_token,
                1e3 * c.train_seconds_per_optimizer_step, 1e3 * c.train_seconds_fixed, 1e3 * c.weight_sync_seconds,
                c.prompt_tokens, samples > 0 ? tokens / samples : 0.0, 100 * c.group_discard_fraction);
  return text;
}

std::string advice_line(const Advice& advice) {
  if (!advice.change) return "";
  const Prediction& now = advice.current.prediction;
  const Prediction& then = advice.recommended.prediction;
  char figures[200];
  std::snprintf(figures, sizeof figures, "%.3f -> %.3f s/step (%.2fx), trainer idle %.0f%% -> %.0f%%, rollout idle %.0f%% -> %.0f%%",
                now.seconds_per_step, then.seconds_per_step, now.seconds_per_step / then.seconds_per_step,
                100 * now.trainer_idle_fraction, 100 * then.trainer_idle_fraction, 100 * now.rollout_idle_fraction,
                100 * then.rollout_idle_fraction);
  return str("recommended: ", describe_change(advice.current.settings, advice.recommended.settings), " (predicted ",
             figures, ")");
}

}  // namespace rlrun::orchestrator::tune
