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

const std::string& Orchestrator::no_batch() const {
  return !admission_.stop_reason().empty() ? admission_.stop_reason() : rewards_.stop_reason();
}

void Orchestrator::release_work(int worker) {
  const std::string& name = fleet_.slots()[worker].name;
  episodes_.requeue_worker(worker);  // its episode calls: sent again
  if (const int64_t samples = dispatcher_.requeue_worker(worker); samples > 0)
    log::info(str(samples, " sample(s) of ", name, " go back to the queue"));
  rewards_.release_worker(worker, name);
  // A member of a round in flight: the round cannot succeed; unblock the others' join now.
  sync_.member_died(name);
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
  Dispatcher::Sample& s = group.samples[routed.index];
  const uint64_t id = dispatcher_.sample_id(group.id, routed.index);
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
  for (const Dispatcher::Sample& s : group.samples) {
    lengths.push_back(static_cast<int64_t>(s.completion.size()));
    worker_seconds = std::max(worker_seconds, s.worker_seconds);
  }
  // What the round trip added: messages, encryption, the orchestrator's own handling.
  const double overhead = group.failed ? 0.0 : std::max(0.0, seconds_since(group.admitted_at) - worker_seconds);
  recorder_.profile().on_group(static_cast<int64_t>(group.prompt_ids.size()), lengths, overhead);
  rewards_.complete(std::move(group));
}

}  // namespace rlrun::orchestrator
