// run/samples/dispatch.cc - the sample path as the Orchestrator carries it out: groups admitted while the
// staleness gate allows, off-policy requests cancelled, results routed to the reward stage or the evaluator.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/orchestrator.h"
#include "trainer/advantages.h"

namespace rlrun::orchestrator {

int64_t Orchestrator::outstanding_groups() const {
  return dispatcher_.groups_outstanding() + rewards_.groups_waiting() + replay_.groups_untrained();
}

Status Orchestrator::send_request(int worker, const GenerateRequest& request) {
  WorkerSlot& w = workers_[worker];
  if (w.failure_record >= 0) {  // a replacement: when it took work (build/bench/fault_recovery_bench reads it)
    double& first_request = outcome_.worker_failures[w.failure_record].replacement_first_request_at;
    if (first_request == 0) first_request = unix_now();
  }
  return server_.send(w.name, request);
}

void Orchestrator::dispatch() {
  while (true) {
    if (config_.enable_individual_sample_lanes && dispatcher_.has_pending()) {
      if (!dispatcher_.send_pending()) return;  // no free lane
      continue;
    }
    if (!gate_.may_dispatch(outstanding_groups())) return;
    if (!config_.enable_individual_sample_lanes && dispatcher_.free_worker() < 0) return;
    const std::optional<PromptAdmission::Admitted> admitted = admission_.admit(steps_.version());
    if (!admitted) return;
    if (admitted->episodes) episodes_.start_group(admitted->group);
  }
}

void Orchestrator::cancel_off_policy() {
  const auto off_policy = [&](uint64_t version) { return gate_.should_cancel(version, steps_.completed); };
  for (auto& [worker, ids] : dispatcher_.take_off_policy(off_policy)) {
    Cancel cancel;
    cancel.request_ids = std::move(ids);
    cancel.reason = "off_policy";
    log::info(str("cancelling ", cancel.request_ids.size(), " request(s) on ", workers_[worker].name,
                  ": more than max_off_policy_steps = ", config_.max_off_policy_steps, " weight updates old"));
    (void)server_.send(workers_[worker].name, cancel);
  }
}

void Orchestrator::on_result(const GenerateResult& result) {
  if (episodes_.on_result(result)) {  // an episode's call
    steps_.tokens_generated += static_cast<int64_t>(result.token_ids.size());
    metrics_.tokens_generated->Increment(static_cast<double>(result.token_ids.size()));
    return;
  }
  const Dispatcher::Routed routed = dispatcher_.route(result);
  if (routed.kind == Dispatcher::Routed::Kind::kIgnored) return;
  const bool ok = result.finish_reason == FinishReason::kStop || result.finish_reason == FinishReason::kLength;
  std::vector<int32_t> tokens(result.token_ids.begin(), result.token_ids.end());
  steps_.tokens_generated += static_cast<int64_t>(tokens.size());
  metrics_.tokens_generated->Increment(static_cast<double>(tokens.size()));
  engine::DecodeOptions decode_options;
  decode_options.skip_special_tokens = true;
  if (routed.kind == Dispatcher::Routed::Kind::kEval) return evaluator_.on_result(routed.problem, result);
  Group& group = *routed.group;
  Sample& s = group.samples[routed.index];
  const uint64_t id = sample_id(group.id, routed.index);
  if (result.finish_reason == FinishReason::kCancelled) {
    ledger_.cancelled(id);
    metrics_.cancelled->Increment();
    group.failed = true;
  } else if (!ok) {
    ledger_.discarded(id, "generation_error");
    metrics_.count_discard("generation_error");
    generation_error_log_.write(log::Level::kWarn, str("generation failed for group ", group.id, ": ", result.error));
    group.failed = true;
  } else {
    ledger_.generated(id);
    s.completion = std::move(tokens);
    s.logprobs.assign(result.logprobs.begin(), result.logprobs.end());
    s.version = result.first_weight_version;
    s.worker_seconds = result.queue_seconds + result.prefill_seconds + result.decode_seconds;
    Result<std::string> text = tokenizer_.decode(s.completion, decode_options);
    if (text.ok()) {
      rewards_.score(group.problem, s, std::move(*text), static_cast<int64_t>(s.completion.size()));
    } else {
      s.reward = 0.0;
    }
  }
  if (dispatcher_.is_complete(group)) complete_group(dispatcher_.complete(group.id));
}

void Orchestrator::complete_group(Group group) {
  std::vector<int64_t> lengths;
  double worker_seconds = 0;  // the slowest sample, as the worker saw it
  for (const Sample& s : group.samples) {
    lengths.push_back(static_cast<int64_t>(s.completion.size()));
    worker_seconds = std::max(worker_seconds, s.worker_seconds);
  }
  // What the round trip added: messages, encryption, the orchestrator's own handling.
  const double overhead = group.failed ? 0.0 : std::max(0.0, seconds_since(group.admitted_at) - worker_seconds);
  profile_.on_group(static_cast<int64_t>(group.prompt_ids.size()), lengths, overhead);
  rewards_.complete(std::move(group));
}

void Orchestrator::log_samples(const char* kind, int64_t step, const std::vector<nlohmann::ordered_json>& samples) const {
  if (samples.empty()) return;
  const std::string path = (std::filesystem::path(metrics_jsonl_).parent_path() / "samples.jsonl").string();
  std::string lines;
  for (const nlohmann::ordered_json& sample : samples) {
    nlohmann::ordered_json line = {{"step", step}, {"kind", kind}};
    line.update(sample);
    // completions are untrusted bytes: invalid UTF-8 is replaced, never a throw
    lines += line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + '\n';
  }
  append_run_file(path, lines);
}

}  // namespace rlrun::orchestrator
