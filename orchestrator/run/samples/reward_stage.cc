#include "orchestrator/run/samples/reward_stage.h"

#include <algorithm>

#include "common/clock.h"
#include "orchestrator/roles/model_from_config.h"
#include "trainer/advantages.h"

namespace rlrun::orchestrator {

RewardStage::RewardStage(const Config& config, RewardFunction& reward, HttpRewardClient* http,
                         const PromptFormat& format, Dispatcher& dispatcher, SampleLedger& ledger, RunMetrics& metrics,
                         tune::LoopProfile& profile, const StepTally& steps, ReferenceScoring::Send send)
    : config_(config), reward_(reward), http_(http), format_(format), dispatcher_(dispatcher), ledger_(ledger),
      metrics_(metrics), profile_(profile), steps_(steps),
      zero_spread_(ZeroSpreadOptions{config.discard_group_zero_advantage, config.max_zero_spread_rounds,
                                     config.prompts_batch_size_for_trainer, static_cast<uint32_t>(config.group_size),
                                     config.kl_coef, config.learning_rate}),
      reference_(std::move(send)) {}

void RewardStage::score(const Problem& problem, Sample& sample, std::string text, int64_t tokens) {
  const LocalReward local = reward_.local(problem, Completion{text, tokens, config_.max_tokens});
  sample.reward = local.total;
  sample.text = std::move(text);
  for (const TermValue& t : local.terms) {
    Mean& m = terms_[std::string(reward_term_name(t.term))];
    m.sum += t.value;
    ++m.n;
  }
}

void RewardStage::note_logs(const std::map<std::string, double>& values) {
  for (const auto& [name, value] : values) {
    server_logs_[name].sum += value;
    ++server_logs_[name].n;
  }
}

void RewardStage::complete(Group group) {
  if (group.failed || group.episodes || http_ == nullptr) return finish_group(std::move(group));
  // OpenRLHF's query is the text the model read and wrote: the prompt as the chat template gives it.
  Result<std::string> rendered = format_.text(group.problem);  // it rendered once already, for the ids
  const std::string prompt = rendered.ok() ? std::move(*rendered) : group.problem.prompt;
  const uint32_t n = dispatcher_.group_size();
  for (uint32_t i = 0; i < n; ++i) {
    Sample& s = group.samples[i];
    RewardItem item{dispatcher_.sample_id(group.id, i), prompt + s.text, prompt, group.problem.answer,
                    group.problem.metadata_json};
    const Status submitted = http_->submit(std::move(item));
    if (!submitted.ok()) {  // a key already waiting: cannot happen for a complete group's ids
      log::warn(str("group ", group.id, ": ", submitted.message()));
      group.failed = true;
    } else {
      ++group.rewards_waiting;
    }
  }
  if (group.failed && group.rewards_waiting == 0) return finish_group(std::move(group));
  metrics_.reward_waiting_samples->Set(static_cast<double>(http_->waiting()));
  awaiting_.emplace(group.id, std::move(group));
}

Status RewardStage::poll() {
  if (http_ == nullptr) return Status();
  const uint32_t n = dispatcher_.group_size();
  for (const RewardReply& reply : http_->poll()) {
    auto it = awaiting_.find(reply.key / n);
    if (it == awaiting_.end()) continue;  // its group is gone (the run is stopping)
    Group& group = it->second;
    group.samples[reply.key % n].reward += reward_.http_weight() * reply.reward;
    terms_["http"].sum += reply.reward;
    ++terms_["http"].n;
    note_logs(reply.extra);
    if (--group.rewards_waiting > 0) continue;
    Group done = std::move(group);
    awaiting_.erase(it);
    finish_group(std::move(done));
  }
  // Requests count once answered: ok = sent - failed - still in flight.
  const HttpRewardClient::Stats now = http_->stats();
  const auto answered_ok = [](const HttpRewardClient::Stats& st) { return st.requests - st.failed_requests - st.in_flight; };
  if (answered_ok(now) > answered_ok(server_seen_))
    metrics_.reward_requests->Add({{"outcome", "ok"}}).Increment(static_cast<double>(answered_ok(now) - answered_ok(server_seen_)));
  if (now.failed_requests > server_seen_.failed_requests)
    metrics_.reward_requests->Add({{"outcome", "failed"}})
        .Increment(static_cast<double>(now.failed_requests - server_seen_.failed_requests));
  server_seen_ = now;
  metrics_.reward_round_trip_seconds->Set(now.round_trip_median_seconds);
  metrics_.reward_waiting_samples->Set(static_cast<double>(http_->waiting()));
  if (!http_->fatal().ok())
    return unavailable(str("the reward server stopped answering (task.reward_url ", config_.task.reward_url,
                           "): ", http_->fatal().message(), "; ", http_->waiting(),
                           " sample(s) were waiting for a reward (summary.json counts them as reward_unavailable)"));
  return Status();
}

std::pair<std::map<std::string, double>, std::map<std::string, double>> RewardStage::take_means() {
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
  return {take(terms_, metrics_.reward_term, "term"), take(server_logs_, metrics_.reward_server_log, "name")};
}

void RewardStage::discard_all(const Group& group, const std::string& reason) {
  profile_.on_group_discarded();
  for (uint32_t i = 0; i < dispatcher_.group_size(); ++i) {
    const uint64_t id = dispatcher_.sample_id(group.id, i);
    if (ledger_.state(id) != SampleState::kGenerated) continue;
    ledger_.discarded(id, reason);
    metrics_.count_discard(reason);
  }
}

void RewardStage::finish_group(Group group) {
  if (group.failed) return discard_all(group, "group_incomplete");
  const uint32_t n = dispatcher_.group_size();
  std::vector<float> rewards(n), advantages(n);
  for (uint32_t i = 0; i < n; ++i) rewards[i] = static_cast<float>(group.samples[i].reward);
  const ZeroSpreadPolicy::Run run{steps_.completed + 1, !dispatcher_.scored().empty(), steps_.reward_means};
  if (zero_spread_.on_group(rewards, run) != ZeroSpreadPolicy::Verdict::kTrain)
    return discard_all(group, "zero_advantage");  // kStop: stop_reason() ends the wait for a batch
  const Result<trainer::Algorithm> algorithm = trainer::parse_algorithm(enum_name(config_.algorithm));
  const Status s = algorithm.ok() ? trainer::compute_group_advantages(*algorithm, rewards, advantages)
                                  : algorithm.status();
  if (!s.ok()) {
    advantage_error_log_.write(log::Level::kWarn, str("group ", group.id, ": ", s.message()));
    return discard_all(group, "advantage_error");
  }
  for (uint32_t i = 0; i < n; ++i) group.samples[i].advantage = advantages[i];
  keep(std::move(group));
}

void RewardStage::keep(Group group) {
  if (rollout_scores_kl_reference(config_) && !group.episodes) {
    // A resumed run's workers never got version 0, the sync that gives them the reference's copy:
    // the trainer (which saved its copy with the checkpoint) scores every group.
    if (const int worker = dispatcher_.least_busy_worker(); worker >= 0 && !resumed_)
      return reference_.submit(std::move(group), worker);
    reference_.note_not_sent();  // no rollout worker serves now, or a resumed run: the trainer scores it
  }
  dispatcher_.push_scored(std::move(group));
}

void RewardStage::on_score_result(const ScoreResult& result) {
  const int64_t unscored_before = reference_.unscored();
  std::optional<Group> group = reference_.on_result(result);
  if (!group) return;
  if (reference_.unscored() > unscored_before)
    reference_error_log_.write(log::Level::kWarn, str("group ", group->id, " has no KL reference log-probs from its rollout ",
                                                      "worker (the trainer scores it): ", reference_.last_error()));
  dispatcher_.push_scored(std::move(*group));
}

void RewardStage::ready_unscored(std::vector<Group> groups, const std::string& why) {
  if (groups.empty()) return;
  reference_error_log_.write(log::Level::kWarn, str(groups.size(), " group(s) go to the trainer without KL reference ",
                                                    "log-probs (it scores them): ", why));
  for (Group& g : groups) dispatcher_.push_scored(std::move(g));
}

void RewardStage::release_worker(int worker, const std::string& name) {
  ready_unscored(reference_.release_worker(worker), str(name, " failed"));
}

void RewardStage::release_overdue(double limit_seconds) {
  ready_unscored(reference_.take_overdue(limit_seconds), "no ScoreResult within rollout_request_timeout_seconds");
}

int64_t RewardStage::groups_waiting() const { return static_cast<int64_t>(awaiting_.size() + reference_.waiting()); }

void RewardStage::finish() {
  const uint32_t n = dispatcher_.group_size();
  for (const auto& [id, g] : awaiting_) {
    for (uint32_t i = 0; i < n; ++i) ledger_.discarded(dispatcher_.sample_id(id, i), "reward_unavailable");
  }
  awaiting_.clear();
  for (const Group& g : reference_.take_all()) {
    for (uint32_t i = 0; i < n; ++i) ledger_.discarded(dispatcher_.sample_id(g.id, i), "unused_at_exit");
  }
  if (http_ != nullptr) (void)http_->abandon();  // their samples are accounted for above
}

RewardStage::Stats RewardStage::stats() const {
  Stats s;
  s.expression = config_.task.reward;
  if (http_ != nullptr) {
    s.url = config_.task.reward_url;
    s.server = http_->stats();
  }
  s.zero_spread = zero_spread_.stats();
  if (rollout_scores_kl_reference(config_)) {
    s.kl_reference_scored_by_rollout = reference_.scored();
    s.kl_reference_scored_by_trainer = reference_.unscored();
  }
  return s;
}

}  // namespace rlrun::orchestrator
