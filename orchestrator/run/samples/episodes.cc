// run/samples/episodes.cc - rows an environment server runs as episodes (orchestrator/env/,
// docs/environments.md): a session on the run's gateway per attempt, the server's answer, retries,
// failures, and the episode's recorded turns made into its sample.
#include <algorithm>

#include "common/observe/log.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

namespace {

using Json = nlohmann::ordered_json;

Json parsed_or(const std::string& text, Json fallback) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? fallback : j;
}

// The row as the environment sees it: its fields, with prompt, answer and messages.
Json episode_row(const Problem& p) {
  Json row = parsed_or(p.metadata_json, Json::object());
  if (!row.is_object()) row = Json::object();
  row["prompt"] = p.prompt;
  row["answer"] = p.answer;
  if (!p.messages_json.empty()) row["messages"] = parsed_or(p.messages_json, Json::array());
  return row;
}

}  // namespace

Status Orchestrator::start_environment() {
  const TaskSection& t = config_.task;
  if (t.environment_url.empty()) return Status();
  rollout::openai::ServedModel model("policy", tokenizer_);
  model.stop_ids = stop_ids_;
  if (format_.is_chat())
    model.render_chat = [format = format_](const nlohmann::ordered_json& messages) { return format.chat_text(messages); };
  model.max_model_len = config_.max_model_len;
  model.vocab_size = tokenizer_.vocab_size();
  GatewayOptions g;
  g.bind = t.environment_gateway_bind;
  g.request_timeout_seconds = t.environment_timeout_seconds;
  g.max_calls = t.environment_max_calls;
  g.seed = static_cast<uint64_t>(config_.seed);
  RLRUN_ASSIGN_OR_RETURN(gateway_, EpisodeGateway::start(g, std::move(model)));
  RLRUN_ASSIGN_OR_RETURN(environment_, EpisodeClient::create({t.environment_url, t.environment_timeout_seconds}));
  outcome_.episodes.url = t.environment_url;
  outcome_.episodes.gateway = gateway_->address();
  log::info(str("environment ", t.environment_url, ": its episodes call the run's OpenAI endpoint http://",
                gateway_->address(), "/sessions/<session>/v1",
                t.environment_field.empty() ? "" : str(" (rows with the field `", t.environment_field, "`)")));
  return Status();
}

bool Orchestrator::is_episode(const Problem& problem) const {
  if (gateway_ == nullptr) return false;
  const std::string& field = config_.task.environment_field;
  if (field.empty()) return true;
  const Json row = parsed_or(problem.metadata_json, Json());
  if (!row.is_object()) return false;
  const auto it = row.find(field);
  return it != row.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>());
}

void Orchestrator::start_episode(Episode e) {
  const bool eval = e.eval_problem.has_value();
  const Problem* problem = nullptr;
  if (eval) {
    problem = &task_.eval_set()[*e.eval_problem];
  } else if (auto g = dispatcher_.in_flight().find(e.group); g != dispatcher_.in_flight().end()) {
    problem = &g->second.problem;
  }
  if (problem == nullptr) return;  // its group is gone
  SessionSampling sampling;
  sampling.temperature = static_cast<float>(eval ? config_.task.eval_temperature : config_.temperature);
  sampling.top_p = eval ? 1.0f : static_cast<float>(config_.top_p);
  sampling.max_tokens = config_.max_tokens;
  if (eval) sampling.seed = *e.eval_problem + 1;  // the same draws for a problem at every evaluation
  e.version = steps_.version();
  const EpisodeGateway::Opened session = gateway_->open(e.version, sampling);
  e.session = session.id;
  if (e.attempt++ == 0) ++outcome_.episodes.started;
  ++outcome_.episodes.attempts;
  const std::string name = eval ? str("eval-", *e.eval_problem) : str(sample_id(e.group, e.index));
  const Json body = {{"episode_id", name},
                     {"attempt", e.attempt},
                     {"base_url", session.base_url},
                     {"model", "policy"},
                     {"api_key", "rlrun"},
                     {"row", episode_row(*problem)},
                     {"eval", eval},
                     {"sampling", {{"temperature", sampling.temperature}, {"top_p", sampling.top_p},
                                   {"max_tokens", sampling.max_tokens}}},
                     {"max_calls", config_.task.environment_max_calls},
                     {"timeout_seconds", config_.task.environment_timeout_seconds}};
  const uint64_t key = next_episode_key_++;
  environment_->start(key, body.dump(-1, ' ', false, Json::error_handler_t::replace));
  episodes_.emplace(key, e);
}

void Orchestrator::route_calls() {
  for (auto& [worker, ids] : gateway_->take_cancels()) {
    Cancel cancel;
    cancel.request_ids = std::move(ids);
    cancel.reason = "episode_call_cancelled";
    (void)server_.send(workers_[worker].name, cancel);
  }
  std::vector<int> serving;
  for (size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i].serves()) serving.push_back(static_cast<int>(i));
  if (serving.empty()) return;  // calls wait (their HTTP clients time out at environment_timeout_seconds)
  for (EpisodeGateway::Call& call : gateway_->take_calls()) {
    const int w = serving[next_call_worker_++ % serving.size()];
    if (Status s = send_request(w, call.request); !s.ok())
      log::warn(str("episode call to ", workers_[w].name, ": ", s.message()));
    gateway_->sent(call.request_id, w);
  }
}

Status Orchestrator::poll_episodes() {
  if (gateway_ == nullptr) return Status();
  route_calls();
  RunOutcome::Episodes& counts = outcome_.episodes;
  for (EpisodeEnd& end : environment_->poll()) {
    auto it = episodes_.find(end.key);
    if (it == episodes_.end()) continue;
    Episode e = it->second;
    episodes_.erase(it);
    EpisodeGateway::Closed closed = gateway_->close(e.session);
    counts.calls += closed.calls;
    if (end.ok) {
      metrics_.episodes->Add({{"outcome", "completed"}}).Increment();
      episode_done(e, end.reply, std::move(closed));
      continue;
    }
    const std::string what = e.eval_problem ? str("evaluation episode ", *e.eval_problem)
                                            : str("episode ", sample_id(e.group, e.index));
    episode_failure_log_.write(log::Level::kWarn, str(what, " attempt ", e.attempt, " failed: ", end.error));
    if (e.attempt < config_.task.environment_max_attempts) {
      ++counts.retried;
      metrics_.episodes->Add({{"outcome", "retried"}}).Increment();
      start_episode(e);
      continue;
    }
    ++counts.failed;
    metrics_.episodes->Add({{"outcome", "failed"}}).Increment();
    if (counts.failures.size() < RunOutcome::Episodes::kMaxListed)
      counts.failures.push_back(str(what, ": ", end.error, " (", e.attempt, " attempts)"));
    episode_lost(e, "episode_failed", false);
    if (counts.failed >= config_.task.environment_max_failed_episodes)
      return unavailable(str(counts.failed, " episodes failed every one of their ", config_.task.environment_max_attempts,
                             " attempts (task.environment_max_failed_episodes = ",
                             config_.task.environment_max_failed_episodes, "): the environment server ",
                             config_.task.environment_url, " is not working; the last: ", end.error,
                             ". Fix the server (summary.json lists the failures) and --resume"));
  }
  route_calls();
  metrics_.episodes_running->Set(static_cast<double>(episodes_.size()));
  return Status();
}

void Orchestrator::episode_done(const Episode& e, const EpisodeReply& reply, EpisodeGateway::Closed closed) {
  RunOutcome::Episodes& counts = outcome_.episodes;
  ++counts.completed;
  counts.turns += static_cast<int64_t>(closed.turns.size());
  counts.exact_turns += closed.spliced;
  counts.retokenized_differ += closed.retokenized_differ;
  rewards_.note_logs(reply.metrics);
  if (e.eval_problem) {
    eval_rewards_[*e.eval_problem] = (reply.has_correct ? reply.correct : reply.reward >= 1.0) ? 1.0 : 0.0;
    return;
  }
  std::vector<EpisodeSegment> segments = episode_segments(closed.turns);
  if (segments.empty()) return episode_lost(e, "episode_no_turns", false);
  Group* group = dispatcher_.episode_returned(e.group, e.index);
  if (group == nullptr) return;
  Sample& s = group->samples[e.index];
  const uint64_t id = sample_id(e.group, e.index);
  ledger_.generated(id);
  s.version = closed.turns.front().version;
  for (const Turn& t : closed.turns) s.version = std::min(s.version, t.version);
  for (const EpisodeSegment& seg : segments) {
    s.completion.insert(s.completion.end(), seg.completion.begin(), seg.completion.end());
    s.logprobs.insert(s.logprobs.end(), seg.logprobs.begin(), seg.logprobs.end());
  }
  s.segments = std::move(segments);
  s.reward = reply.reward;
  engine::DecodeOptions text_options;
  text_options.skip_special_tokens = true;
  Result<std::string> text = tokenizer_.decode(closed.turns.back().completion, text_options);
  s.text = text.ok() ? std::move(*text) : "";
  counts.sequences += static_cast<int64_t>(s.segments.size());
  if (dispatcher_.is_complete(*group)) complete_group(dispatcher_.complete(group->id));
}

void Orchestrator::episode_lost(const Episode& e, const std::string& reason, bool cancelled) {
  if (e.eval_problem) {
    eval_rewards_[*e.eval_problem] = 0.0;  // counts as wrong
    return;
  }
  Group* group = dispatcher_.episode_returned(e.group, e.index);
  if (group == nullptr) return;
  const uint64_t id = sample_id(e.group, e.index);
  if (cancelled) {
    ledger_.cancelled(id);
    metrics_.cancelled->Increment();
  } else {
    ledger_.discarded(id, reason);
    metrics_.count_discard(reason);
  }
  group->failed = true;
  if (dispatcher_.is_complete(*group)) complete_group(dispatcher_.complete(group->id));
}

void Orchestrator::cancel_off_policy_episodes() {
  if (gateway_ == nullptr) return;
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    const Episode e = it->second;
    if (e.eval_problem || !gate_.should_cancel(e.version, steps_.completed)) {
      ++it;
      continue;
    }
    environment_->abandon(it->first);
    it = episodes_.erase(it);
    outcome_.episodes.calls += gateway_->close(e.session).calls;
    ++outcome_.episodes.cancelled;
    metrics_.episodes->Add({{"outcome", "cancelled"}}).Increment();
    episode_lost(e, "off_policy", true);
  }
}

void Orchestrator::abandon_episodes() {
  if (gateway_ == nullptr) return;
  for (const auto& [key, e] : episodes_) {
    environment_->abandon(key);
    outcome_.episodes.calls += gateway_->close(e.session).calls;
  }
  outcome_.episodes.in_flight_at_exit = static_cast<int64_t>(episodes_.size());
  episodes_.clear();
  gateway_->shut_down();  // the environment's calls still waiting end now
}

}  // namespace rlrun::orchestrator
