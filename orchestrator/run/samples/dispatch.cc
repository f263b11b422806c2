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
  return dispatcher_.groups_outstanding() + static_cast<int64_t>(awaiting_reward_.size() + reference_scoring_.waiting()) +
         replay_.groups_untrained();
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
      const uint64_t id = dispatcher_.admit_episodes(std::move(prompt.problem), static_cast<uint64_t>(trainer_step_));
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
        dispatcher_.admit(std::move(prompt.problem), std::move(prompt.ids), static_cast<uint64_t>(trainer_step_));
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
  const auto off_policy = [&](uint64_t version) { return gate_.should_cancel(version, trainer_step_); };
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
    outcome_.tokens_generated += static_cast<int64_t>(result.token_ids.size());
    metrics_.tokens_generated->Increment(static_cast<double>(result.token_ids.size()));
    return;
  }
  const Dispatcher::Routed routed = dispatcher_.route(result);
  if (routed.kind == Dispatcher::Routed::Kind::kIgnored) return;
  const bool ok = result.finish_reason == FinishReason::kStop || result.finish_reason == FinishReason::kLength;
  std::vector<int32_t> tokens(result.token_ids.begin(), result.token_ids.end());
  outcome_.tokens_generated += static_cast<int64_t>(tokens.size());
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
      const LocalReward local = reward_.local(
          group.problem, Completion{*text, static_cast<int64_t>(s.completion.size()), config_.max_tokens});
      s.reward = local.total;
      s.text = std::move(*text);
      note_reward_terms(local);
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
  if (group.failed || group.episodes || http_reward_ == nullptr) return finish_group(std::move(group));
  // OpenRLHF's query is the text the model read and wrote: the prompt as the chat template gives it.
  Result<std::string> rendered = format_.text(group.problem);  // it rendered once already, for the ids
  const std::string prompt = rendered.ok() ? std::move(*rendered) : group.problem.prompt;
  for (uint32_t i = 0; i < group_size_; ++i) {
    Sample& s = group.samples[i];
    RewardItem item{sample_id(group.id, i), prompt + s.text, prompt, group.problem.answer,
                    group.problem.metadata_json};
    const Status submitted = http_reward_->submit(std::move(item));
    if (!submitted.ok()) {  // a key already waiting: cannot happen for a complete group's ids
      log::warn(str("group ", group.id, ": ", submitted.message()));
      group.failed = true;
    } else {
      ++group.rewards_waiting;
    }
  }
  if (group.failed && group.rewards_waiting == 0) return finish_group(std::move(group));
  metrics_.reward_waiting_samples->Set(static_cast<double>(http_reward_->waiting()));
  awaiting_reward_.emplace(group.id, std::move(group));
}

Status Orchestrator::poll_rewards() {
  if (http_reward_ == nullptr) return Status();
  for (const RewardReply& reply : http_reward_->poll()) {
    auto it = awaiting_reward_.find(reply.key / group_size_);
    if (it == awaiting_reward_.end()) continue;  // its group is gone (the run is stopping)
    Group& group = it->second;
    group.samples[reply.key % group_size_].reward += reward_.http_weight() * reply.reward;
    reward_terms_["http"].sum += reply.reward;
    ++reward_terms_["http"].n;
    for (const auto& [name, value] : reply.extra) {
      reward_server_logs_[name].sum += value;
      ++reward_server_logs_[name].n;
    }
    if (--group.rewards_waiting > 0) continue;
    Group done = std::move(group);
    awaiting_reward_.erase(it);
    finish_group(std::move(done));
  }
  // Requests count once answered: ok = sent - failed - still in flight.
  const HttpRewardClient::Stats now = http_reward_->stats();
  const auto answered_ok = [](const HttpRewardClient::Stats& st) { return st.requests - st.failed_requests - st.in_flight; };
  if (answered_ok(now) > answered_ok(reward_stats_seen_))
    metrics_.reward_requests->Add({{"outcome", "ok"}}).Increment(static_cast<double>(answered_ok(now) - answered_ok(reward_stats_seen_)));
  if (now.failed_requests > reward_stats_seen_.failed_requests)
    metrics_.reward_requests->Add({{"outcome", "failed"}})
        .Increment(static_cast<double>(now.failed_requests - reward_stats_seen_.failed_requests));
  reward_stats_seen_ = now;
  metrics_.reward_round_trip_seconds->Set(now.round_trip_median_seconds);
  metrics_.reward_waiting_samples->Set(static_cast<double>(http_reward_->waiting()));
  if (!http_reward_->fatal().ok())
    return unavailable(str("the reward server stopped answering (task.reward_url ", config_.task.reward_url,
                           "): ", http_reward_->fatal().message(), "; ", http_reward_->waiting(),
                           " sample(s) were waiting for a reward (summary.json counts them as reward_unavailable)"));
  return Status();
}

void Orchestrator::note_reward_terms(const LocalReward& local) {
  for (const TermValue& t : local.terms) {
    Mean& m = reward_terms_[std::string(reward_term_name(t.term))];
    m.sum += t.value;
    ++m.n;
  }
}

std::pair<std::map<std::string, double>, std::map<std::string, double>> Orchestrator::take_reward_means() {
  const auto take = [](std::map<std::string, Mean>& sums, prometheus::Family<prometheus::Gauge>* gauges, const char* label) {
    std::map<std::string, double> means;
    for (auto& [name, m] : sums) {
      if (m.n == 0) continue;
      means[name] = m.sum / static_cast<double>(m.n);
      gauges->Add({{label, name}}).Set(means[name]);
      m = Mean{};
    }
    return means;
  };
  return {take(reward_terms_, metrics_.reward_term, "term"), take(reward_server_logs_, metrics_.reward_server_log, "name")};
}

void Orchestrator::finish_group(Group group) {
  auto discard_all = [&](const std::string& reason) {
    profile_.on_group_discarded();
    for (uint32_t i = 0; i < group_size_; ++i) {
      if (ledger_.state(sample_id(group.id, i)) != SampleState::kGenerated) continue;
      ledger_.discarded(sample_id(group.id, i), reason);
      metrics_.count_discard(reason);
    }
  };
  if (group.failed) return discard_all("group_incomplete");
  std::vector<float> rewards(group_size_), advantages(group_size_);
  for (uint32_t i = 0; i < group_size_; ++i) rewards[i] = static_cast<float>(group.samples[i].reward);
  rewarded_once_ = rewarded_once_ || std::any_of(rewards.begin(), rewards.end(), [](float r) { return r > 0.0f; });
  samples_scored_ += group_size_;
  samples_rewarded_ += std::count_if(rewards.begin(), rewards.end(), [](float r) { return r > 0.0f; });
  if (config_.discard_group_zero_advantage && trainer::group_has_zero_spread(rewards)) {
    if (!keep_zero_spread_) return discard_zero_spread(rewards[0], discard_all);
    ++outcome_.zero_spread_kept;  // past max_zero_spread_rounds: it fills the waiting step's batch
  }
  const Result<trainer::Algorithm> algorithm = trainer::parse_algorithm(enum_name(config_.algorithm));
  const Status s = algorithm.ok() ? trainer::compute_group_advantages(*algorithm, rewards, advantages)
                                  : algorithm.status();
  if (!s.ok()) {
    advantage_error_log_.write(log::Level::kWarn, str("group ", group.id, ": ", s.message()));
    return discard_all("advantage_error");
  }
  for (uint32_t i = 0; i < group_size_; ++i) group.samples[i].advantage = advantages[i];
  keep_group(std::move(group));
}

void Orchestrator::keep_group(Group group) {
  if (rollout_scores_kl_reference(config_) && !group.episodes) {
    // A resumed run's workers never got version 0, the sync that gives them the reference's copy:
    // the trainer (which saved its copy with the checkpoint) scores every group.
    if (const int worker = dispatcher_.least_busy_worker(); worker >= 0 && !resumed_)
      return reference_scoring_.submit(std::move(group), worker);
    reference_scoring_.note_not_sent();  // no rollout worker serves now, or a resumed run: the trainer scores it
  }
  dispatcher_.push_scored(std::move(group));
}

void Orchestrator::on_score_result(const ScoreResult& result) {
  const int64_t unscored_before = reference_scoring_.unscored();
  std::optional<Group> group = reference_scoring_.on_result(result);
  if (!group) return;
  if (reference_scoring_.unscored() > unscored_before)
    reference_error_log_.write(log::Level::kWarn, str("group ", group->id, " has no KL reference log-probs from its rollout ",
                                                      "worker (the trainer scores it): ", reference_scoring_.last_error()));
  dispatcher_.push_scored(std::move(*group));
}

void Orchestrator::queue_unscored(std::vector<Group> groups, const std::string& why) {
  if (groups.empty()) return;
  reference_error_log_.write(log::Level::kWarn, str(groups.size(), " group(s) go to the trainer without KL reference ",
                                                    "log-probs (it scores them): ", why));
  for (Group& g : groups) dispatcher_.push_scored(std::move(g));
}

void Orchestrator::discard_zero_spread(float reward, const std::function<void(const std::string&)>& discard_all) {
  discard_all("zero_advantage");
  ++zero_spread_.discarded;
  zero_spread_.failed += reward <= 0.0f;
  zero_spread_.solved += reward >= 1.0f;
  const int64_t batch = config_.prompts_batch_size_for_trainer;
  const int64_t bound = config_.max_zero_spread_rounds * batch;
  if (bound == 0) {  // waiting without bound, as asked: still say why no batch forms
    if (zero_spread_.discarded >= 10 * batch)
      zero_spread_log_.write(log::Level::kWarn,
                             str("step ", outcome_.steps_completed + 1, ": ", zero_spread_.discarded,
                                 " groups in a row had no reward spread and were discarded (", zero_spread_.solved,
                                 " solved by every sample); max_zero_spread_rounds = 0 waits without bound"));
    return;
  }
  if (zero_spread_.discarded < bound) return;
  // A policy that never (or always) solves the task gives no group a reward spread: past the bound
  // the step stops waiting, and the log says which case it is. One that has never earned anything
  // in this run cannot learn: the run stops.
  if (dispatcher_.scored().empty() && zero_spread_.failed == zero_spread_.discarded && !rewarded_once_) {
    no_batch_error_ = str(zero_spread_.discarded, " groups in a row earned no reward and were discarded for no reward ",
                          "spread (discard_group_zero_advantage; max_zero_spread_rounds = ", config_.max_zero_spread_rounds,
                          " batches), so no batch can form: the policy never succeeds. ",
                          "Start from a model that solves some prompts (more format_warm_start_steps, a pretrained ",
                          "model.checkpoint), make the task easier, or set discard_group_zero_advantage: false");
    return;
  }
  keep_zero_spread_ = true;
  const int64_t collapse_before = outcome_.reward_collapse_step;
  const std::string message =
      str("step ", outcome_.steps_completed + 1, ": ", zero_spread_.discarded, " groups had no reward spread (",
          zero_spread_.solved, " solved by every sample), more than max_zero_spread_rounds = ",
          config_.max_zero_spread_rounds, " batches: the step fills its batch with such groups (advantage 0) ",
          "instead of waiting. ", zero_spread_advice());
  if (outcome_.reward_collapse_step != collapse_before) {
    log::warn(message);  // the first sign of a collapse is never held back
  } else {
    zero_spread_log_.write(log::Level::kWarn, message);
  }
}

std::string Orchestrator::zero_spread_advice() {
  if (2 * zero_spread_.solved > zero_spread_.discarded)
    return "The policy solves most prompts every time: the task is learned; stop here or make it harder";
  // Every one earned nothing, in a run whose policy had been succeeding for a while: it has likely
  // unlearned what it could do (GRPO pushing away from wrong answers can push it off the answer
  // format too), the failure a KL pull to the reference prevents. A policy that rarely succeeds yet
  // (the quickstart's first steps: about 1 sample in 100 earns a reward, and droughts of 80 groups
  // are common) is not named: before the drought, at least 1 sample in 10 earned a reward, over at
  // least 10 rewarded steps.
  constexpr int64_t kRewardedStepsBefore = 10;
  constexpr double kSuccessRateBefore = 0.1;
  const std::vector<double>& means = outcome_.step_reward_means;
  const int64_t rewarded_steps = std::count_if(means.begin(), means.end(), [](double m) { return m > 0.0; });
  const auto best = std::max_element(means.begin(), means.end(), [](double a, double b) {
    return std::isnan(a) || (!std::isnan(b) && b > a);
  });
  const int64_t before = samples_scored_ - zero_spread_.discarded * static_cast<int64_t>(group_size_);
  const double success_rate = before > 0 ? static_cast<double>(samples_rewarded_) / static_cast<double>(before) : 0.0;
  if (zero_spread_.failed < zero_spread_.discarded || rewarded_steps < kRewardedStepsBefore ||
      success_rate < kSuccessRateBefore)
    return "Few groups teach anything: consider a larger group_size or an easier task";
  const int64_t best_step = static_cast<int64_t>(best - means.begin()) + 1;  // one mean per completed step
  if (outcome_.reward_collapse_step == 0) outcome_.reward_collapse_step = outcome_.steps_completed + 1;
  return str("None of them earned any reward, though ", static_cast<int>(100 * success_rate + 0.5),
             "% of the samples before did and ", rewarded_steps, " earlier steps trained on rewarded samples ",
             "(mean reward up to ", *best, ", step ", best_step, "): the policy may have lost what it could do ",
             "(often the answer format; the samples in ",
             "samples.jsonl show it). ",
             config_.kl_coef > 0 ? str("kl_coef ", config_.kl_coef, " did not hold it near its start: raise it")
                                 : std::string("Nothing holds it near its start: set kl_coef (e.g. 0.02 to 0.1)"),
             ", or lower learning_rate (", config_.learning_rate, ")");
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
    const uint64_t version = static_cast<uint64_t>(trainer_step_);
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
  log_samples("eval", outcome_.steps_completed, shown);
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
