#include "orchestrator/tune/loop_profile.h"

#include <cmath>

#include "common/atomic_file.h"
#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator::tune {
namespace {

using Json = nlohmann::json;

double metric(const std::map<std::string, double>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() || !std::isfinite(it->second) ? 0.0 : it->second;
}

// A finite number >= 0 at `key` of `j`, else an error naming it.
Status read_number(const Json& j, const char* key, double& out) {
  if (!j.contains(key) || !j[key].is_number()) return invalid_argument(str("profile: \"", key, "\" is not a number"));
  out = j[key].get<double>();
  if (!std::isfinite(out) || out < 0) return invalid_argument(str("profile: \"", key, "\" must be finite and >= 0"));
  return Status();
}

Status read_count(const Json& j, const char* key, int64_t& out) {
  double v = 0;
  RLRUN_RETURN_IF_ERROR(read_number(j, key, v));
  if (v > 9e15 || v != std::floor(v)) return invalid_argument(str("profile: \"", key, "\" must be a whole number"));
  out = static_cast<int64_t>(v);
  return Status();
}

}  // namespace

bool LoopProfile::on_heartbeat(const std::string& worker, std::span<const double> engine_step_costs,
                               double last_weight_load_seconds) {
  Result<rollout::StepCostSums> sums = rollout::StepCostSums::from_flat(engine_step_costs);
  if (!sums.ok()) return false;
  auto it = current_.find(worker);
  if (it != current_.end() && sums->steps() < it->second.steps()) retired_ += it->second;  // a new process
  current_[worker] = *sums;
  double& last = last_load_[worker];
  if (last_weight_load_seconds > 0 && std::isfinite(last_weight_load_seconds) && last_weight_load_seconds != last) {
    load_seconds_ += last_weight_load_seconds;
    ++loads_;
    last = last_weight_load_seconds;
  }
  return true;
}

void LoopProfile::on_group(int64_t prompt_tokens, const std::vector<int64_t>& completion_tokens,
                           double request_overhead_seconds) {
  ++groups_finished_;
  if (std::isfinite(request_overhead_seconds) && request_overhead_seconds > 0) request_overhead_seconds_ += request_overhead_seconds;
  prompt_tokens_ += static_cast<double>(prompt_tokens);
  for (int64_t n : completion_tokens) ++completions_[n];
}

void LoopProfile::on_train_step(const std::map<std::string, double>& rank0, double train_seconds, double sync_seconds) {
  ++train_.steps;
  train_.cpu_seconds += metric(rank0, "cpu_seconds");
  train_.wall_seconds += train_seconds;
  train_.compute_seconds += metric(rank0, "seconds_forward_backward") + metric(rank0, "seconds_recompute") +
                            metric(rank0, "seconds_reference");
  train_.optimizer_seconds += metric(rank0, "seconds_optimizer");
  train_.tokens += metric(rank0, "tokens");
  train_.optimizer_steps += metric(rank0, "optimizer_steps");
  reference_retired_.trainer_seconds += metric(rank0, "seconds_reference");
  reference_retired_.trainer_tokens += metric(rank0, "reference_tokens");
  train_.sync_seconds += sync_seconds;
}

void LoopProfile::on_lent_train_step(const std::map<std::string, double>& rank0, int64_t threads) {
  ++lent_train_.steps;
  lent_train_.threads = threads;
  lent_train_.compute_seconds += metric(rank0, "seconds_forward_backward") + metric(rank0, "seconds_recompute") +
                                 metric(rank0, "seconds_reference");
  lent_train_.tokens += metric(rank0, "tokens");
}

void LoopProfile::on_reference_scoring(const std::string& worker, double cpu_seconds, double tokens) {
  if (!std::isfinite(cpu_seconds) || !std::isfinite(tokens) || cpu_seconds < 0 || tokens < 0) return;
  auto it = reference_current_.find(worker);
  if (it != reference_current_.end() && tokens < it->second.second) {  // a new process
    reference_retired_.rollout_cpu_seconds += it->second.first;
    reference_retired_.rollout_tokens += it->second.second;
  }
  reference_current_[worker] = {cpu_seconds, tokens};
}

LoopProfile::ReferenceSums LoopProfile::reference() const {
  ReferenceSums all = reference_retired_;
  for (const auto& [worker, sums] : reference_current_) {
    all.rollout_cpu_seconds += sums.first;
    all.rollout_tokens += sums.second;
  }
  return all;
}

void LoopProfile::set_loop(double loop_seconds, double orchestrator_cpu_seconds) {
  loop_seconds_ = loop_seconds;
  orchestrator_cpu_seconds_ = orchestrator_cpu_seconds;
}

rollout::StepCostSums LoopProfile::engine_steps() const {
  rollout::StepCostSums all = retired_;
  for (const auto& [worker, sums] : current_) all += sums;
  return all;
}

Json LoopProfile::to_json() const {
  Json hist = Json::array();
  for (const auto& [len, n] : completions_) hist.push_back({len, n});
  return {{"host", host},
          {"trainer_matmul", trainer_matmul},
          {"rollout_workers", rollout_workers},
          {"trainer_ranks", trainer_ranks},
          {"threads", threads},
          {"on_devices", on_devices},
          {"nodes", nodes},
          {"slots_per_node", slots_per_node},
          {"parameters", parameters},
          {"engine_step_costs", engine_steps().flat()},
          {"weight_load_seconds", load_seconds_},
          {"weight_loads", loads_},
          {"train_steps", train_.steps},
          {"train_cpu_seconds", train_.cpu_seconds},
          {"train_wall_seconds", train_.wall_seconds},
          {"train_compute_seconds", train_.compute_seconds},
          {"train_optimizer_seconds", train_.optimizer_seconds},
          {"train_tokens", train_.tokens},
          {"optimizer_steps", train_.optimizer_steps},
          {"weight_sync_seconds", train_.sync_seconds},
          {"lent_train_steps", lent_train_.steps},
          {"lent_trainer_threads", lent_train_.threads},
          {"lent_train_compute_seconds", lent_train_.compute_seconds},
          {"lent_train_tokens", lent_train_.tokens},
          {"reward_seconds", reward_seconds_},
          {"loop_seconds", loop_seconds_},
          {"orchestrator_cpu_seconds", orchestrator_cpu_seconds_},
          {"groups_finished", groups_finished_},
          {"groups_discarded", groups_discarded_},
          {"prompt_tokens", prompt_tokens_},
          {"request_overhead_seconds", request_overhead_seconds_},
          {"completion_tokens", hist},
          {"reference_trainer_seconds", reference().trainer_seconds},
          {"reference_trainer_tokens", reference().trainer_tokens},
          {"reference_rollout_cpu_seconds", reference().rollout_cpu_seconds},
          {"reference_rollout_tokens", reference().rollout_tokens}};
}

Result<LoopProfile> LoopProfile::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("profile: not a JSON object");
  LoopProfile p;
  RLRUN_RETURN_IF_ERROR(read_count(j, "rollout_workers", p.rollout_workers));
  RLRUN_RETURN_IF_ERROR(read_count(j, "trainer_ranks", p.trainer_ranks));
  RLRUN_RETURN_IF_ERROR(read_count(j, "threads", p.threads));
  RLRUN_RETURN_IF_ERROR(read_count(j, "parameters", p.parameters));
  RLRUN_RETURN_IF_ERROR(read_count(j, "nodes", p.nodes));
  RLRUN_RETURN_IF_ERROR(read_count(j, "slots_per_node", p.slots_per_node));
  if (p.nodes < 1 || p.slots_per_node < 1) return invalid_argument("profile: \"nodes\" and \"slots_per_node\" must be >= 1");
  if (!j.contains("on_devices") || !j["on_devices"].is_boolean()) return invalid_argument("profile: \"on_devices\" is not true/false");
  p.on_devices = j["on_devices"].get<bool>();
  if (!j.contains("engine_step_costs") || !j["engine_step_costs"].is_array())
    return invalid_argument("profile: \"engine_step_costs\" is not an array");
  std::vector<double> flat;
  for (const Json& v : j["engine_step_costs"]) {
    if (!v.is_number()) return invalid_argument("profile: \"engine_step_costs\" holds a non-number");
    flat.push_back(v.get<double>());
  }
  Result<rollout::StepCostSums> sums = rollout::StepCostSums::from_flat(flat);
  if (!sums.ok()) return invalid_argument(str("profile: ", sums.status().message()));
  p.retired_ = *sums;
  RLRUN_RETURN_IF_ERROR(read_number(j, "weight_load_seconds", p.load_seconds_));
  RLRUN_RETURN_IF_ERROR(read_count(j, "weight_loads", p.loads_));
  RLRUN_RETURN_IF_ERROR(read_count(j, "train_steps", p.train_.steps));
  RLRUN_RETURN_IF_ERROR(read_number(j, "train_cpu_seconds", p.train_.cpu_seconds));
  RLRUN_RETURN_IF_ERROR(read_number(j, "train_wall_seconds", p.train_.wall_seconds));
  RLRUN_RETURN_IF_ERROR(read_number(j, "train_compute_seconds", p.train_.compute_seconds));
  RLRUN_RETURN_IF_ERROR(read_number(j, "train_optimizer_seconds", p.train_.optimizer_seconds));
  RLRUN_RETURN_IF_ERROR(read_number(j, "train_tokens", p.train_.tokens));
  RLRUN_RETURN_IF_ERROR(read_number(j, "optimizer_steps", p.train_.optimizer_steps));
  RLRUN_RETURN_IF_ERROR(read_number(j, "weight_sync_seconds", p.train_.sync_seconds));
  RLRUN_RETURN_IF_ERROR(read_number(j, "reward_seconds", p.reward_seconds_));
  RLRUN_RETURN_IF_ERROR(read_number(j, "loop_seconds", p.loop_seconds_));
  RLRUN_RETURN_IF_ERROR(read_number(j, "orchestrator_cpu_seconds", p.orchestrator_cpu_seconds_));
  RLRUN_RETURN_IF_ERROR(read_count(j, "groups_finished", p.groups_finished_));
  RLRUN_RETURN_IF_ERROR(read_count(j, "groups_discarded", p.groups_discarded_));
  RLRUN_RETURN_IF_ERROR(read_number(j, "prompt_tokens", p.prompt_tokens_));
  RLRUN_RETURN_IF_ERROR(read_number(j, "request_overhead_seconds", p.request_overhead_seconds_));
  // The lent steps' sums came later still: a profile without them measured none.
  if (j.contains("lent_train_steps")) {
    RLRUN_RETURN_IF_ERROR(read_count(j, "lent_train_steps", p.lent_train_.steps));
    RLRUN_RETURN_IF_ERROR(read_count(j, "lent_trainer_threads", p.lent_train_.threads));
    RLRUN_RETURN_IF_ERROR(read_number(j, "lent_train_compute_seconds", p.lent_train_.compute_seconds));
    RLRUN_RETURN_IF_ERROR(read_number(j, "lent_train_tokens", p.lent_train_.tokens));
  }
  // The KL reference's sums came later: a profile without them measured none.
  for (const auto& [key, field] : {std::pair{"reference_trainer_seconds", &p.reference_retired_.trainer_seconds},
                                   {"reference_trainer_tokens", &p.reference_retired_.trainer_tokens},
                                   {"reference_rollout_cpu_seconds", &p.reference_retired_.rollout_cpu_seconds},
                                   {"reference_rollout_tokens", &p.reference_retired_.rollout_tokens}})
    if (j.contains(key)) RLRUN_RETURN_IF_ERROR(read_number(j, key, *field));
  if (!j.contains("completion_tokens") || !j["completion_tokens"].is_array())
    return invalid_argument("profile: \"completion_tokens\" is not an array of [length, count]");
  for (const Json& pair : j["completion_tokens"]) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer() ||
        pair[0].get<int64_t>() < 0 || pair[1].get<int64_t>() < 0)
      return invalid_argument("profile: \"completion_tokens\" holds an entry that is not [length, count]");
    p.completions_[pair[0].get<int64_t>()] += pair[1].get<int64_t>();
  }
  return p;
}

Status LoopProfile::write(const std::string& path) const { return write_file_atomic(path, to_json().dump() + "\n"); }

Result<LoopProfile> LoopProfile::read(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(std::string text, read_file(path, "run profile"));
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(str(path, ": not valid JSON (a run's profile.json, written by rlrun)"));
  Result<LoopProfile> p = from_json(j);
  if (!p.ok()) return invalid_argument(str(path, ": ", p.status().message()));
  return p;
}

}  // namespace rlrun::orchestrator::tune
