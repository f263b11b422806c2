// run/samples/dispatch.cc - the sample path: dispatch, results, rewards and advantages, evaluation (the
// batches and steps: run/step.cc).
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

namespace {

using std::chrono::milliseconds;
constexpr int kMaxPromptTries = 100;  // consecutive too-long prompts before giving up a turn
// Consecutive prompts skipped (too long, or the chat template refused them) after which no prompt
// is expected to fit: the run stops saying why instead of waiting for a batch that cannot form.
constexpr int64_t kMaxPromptsSkippedInARow = 1000;

}  // namespace

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

bool Orchestrator::start_group() {
  for (int tries = 0; tries < kMaxPromptTries; ++tries) {
    Prompt prompt;
    try {
      prompt = prompts_.next();
    } catch (const std::exception& e) {  // the dataset changed or became unreadable under the run
      no_batch_error_ = str("cannot draw the next training prompt: ", e.what());
      return false;
    }
    if (is_episode(prompt.problem)) {  // an environment runs it: no length to check here
      const uint64_t id = dispatcher_.admit_episodes(std::move(prompt.problem), steps_.version());
      for (uint32_t i = 0; i < group_size_; ++i) ledger_.dispatched(sample_id(id, i));
      dispatch_count_.add(group_size_);
      prompts_skipped_in_a_row_ = 0;
      for (uint32_t i = 0; i < group_size_; ++i) start_episode(Episode{id, i, std::nullopt, 0, 0, 0});
      return true;
    }
    const int64_t n = static_cast<int64_t>(prompt.ids.size());
    if (n == 0 || n > config_.max_prompt_tokens || n + config_.max_tokens > config_.max_model_len) {
      longest_skipped_prompt_ = std::max(longest_skipped_prompt_, n);
      if (++outcome_.prompts_skipped == 1)
        log::warn(str("skipping a prompt of ", n, " tokens (max_prompt_tokens ", config_.max_prompt_tokens,
                      ", max_model_len ", config_.max_model_len, " with max_tokens ", config_.max_tokens,
                      "); skipped prompts are counted in summary.json"));
      if (++prompts_skipped_in_a_row_ >= kMaxPromptsSkippedInARow) {
        no_batch_error_ =
            str(prompts_skipped_in_a_row_, " prompts in a row were skipped (the longest has ", longest_skipped_prompt_,
                " tokens as ", format_.description(), " gives it; max_prompt_tokens = ", config_.max_prompt_tokens,
                ", max_model_len = ", config_.max_model_len, " with max_tokens = ", config_.max_tokens,
                "), so no batch can form: raise max_prompt_tokens and max_model_len",
                format_.is_chat() ? ", or set task.chat_template: none for raw prompts" : "");
        return false;
      }
      continue;
    }
    prompts_skipped_in_a_row_ = 0;
    const uint64_t id =
        dispatcher_.admit(std::move(prompt.problem), std::move(prompt.ids), steps_.version());
    for (uint32_t i = 0; i < group_size_; ++i) ledger_.dispatched(sample_id(id, i));
    dispatch_count_.add(group_size_);
    return true;
  }
  return false;
}

void Orchestrator::dispatch() {
  while (true) {
    if (config_.enable_individual_sample_lanes && dispatcher_.has_pending()) {
      if (!dispatcher_.send_pending()) return;  // no free lane
      continue;
    }
    if (!gate_.may_dispatch(outstanding_groups())) return;
    if (!config_.enable_individual_sample_lanes && dispatcher_.free_worker() < 0) return;
    if (!start_group()) return;
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
  if (gateway_ != nullptr && gateway_->on_result(result)) {  // an episode's call
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
  if (routed.kind == Dispatcher::Routed::Kind::kEval) {
    const Problem& p = task_.eval_set()[routed.problem];
    Result<std::string> text = tokenizer_.decode(tokens, decode_options);
    eval_rewards_[routed.problem] = ok && text.ok() && reward_.correct(p, *text) ? 1.0 : 0.0;
    if (routed.problem < kLoggedSamples) eval_texts_[routed.problem] = text.ok() ? *text : "";
    return;
  }
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

Result<std::optional<double>> Orchestrator::evaluate(const char* when) {
  const std::vector<Problem>& problems = task_.eval_set();
  if (problems.empty() || config_.task.eval_size == 0) return std::optional<double>();
  ScopedSpan span("eval", "orchestrator");
  eval_rewards_.clear();
  std::vector<int> rollouts;  // ready ones; the problems of a dead worker are dispatched again
  for (size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i].serves())
      rollouts.push_back(static_cast<int>(i));
  size_t sent = 0;
  for (size_t p = 0; p < problems.size(); ++p) {
    if (is_episode(problems[p])) {  // in its own session, sampled at eval_temperature
      start_episode(Episode{0, 0, p, 0, 0, 0});
      continue;
    }
    Result<std::vector<int32_t>> ids = format_.ids(problems[p]);
    const size_t n = ids.ok() ? ids->size() : 0;
    if (n == 0 || static_cast<int64_t>(n) + config_.max_tokens > config_.max_model_len) {
      eval_rewards_[p] = 0.0;  // cannot be asked: counts as wrong
      continue;
    }
    const uint64_t version = steps_.version();
    if (rollouts.empty()) {
      dispatcher_.requeue_eval(p, std::move(*ids), version);
      continue;
    }
    const int w = rollouts[sent++ % rollouts.size()];
    if (Status s = dispatcher_.send_eval(p, std::move(*ids), version, w); !s.ok())
      log::warn(str("evaluation request to ", workers_[w].name, ": ", s.message()));
  }
  // Needs no trainer: a trainer failure found meanwhile is acted on after it (tick).
  evaluating_ = true;
  Status waited;
  while (waited.ok() && eval_rewards_.size() < problems.size()) waited = tick(kTick, false);
  evaluating_ = false;
  RLRUN_RETURN_IF_ERROR(waited);
  double correct = 0;
  for (const auto& [p, reward] : eval_rewards_) correct += reward > 0.5 ? 1 : 0;
  const double accuracy = correct / static_cast<double>(problems.size());
  log::info(str("eval ", when, ": accuracy ", accuracy, " on ", problems.size(), " held-out problems (",
                config_.task.eval_temperature == 0 ? std::string("greedy") : str("temperature ", config_.task.eval_temperature),
                ")"));
  metrics_.eval_accuracy->Set(accuracy);
  last_eval_accuracy_ = accuracy;
  std::vector<nlohmann::ordered_json> shown;
  for (const auto& [p, text] : eval_texts_) {
    shown.push_back({{"prompt", problems[p].prompt}, {"completion", text}, {"answer", problems[p].answer},
                     {"reward", eval_rewards_[p]}, {"advantage", nullptr}, {"correct", eval_rewards_[p] > 0.5}});
  }
  eval_texts_.clear();
  log_samples("eval", steps_.completed, shown);
  return std::optional<double>(accuracy);
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
