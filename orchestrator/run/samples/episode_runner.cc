#include "orchestrator/run/samples/episode_runner.h"

#include <algorithm>

#include "common/observe/log.h"

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

EpisodeRunner::EpisodeRunner(const Config& config, const engine::Tokenizer& tokenizer, const Task& task,
                             Dispatcher& dispatcher, const std::vector<WorkerSlot>& workers, SampleLedger& ledger,
                             RunMetrics& metrics, RewardStage& rewards, const StepTally& steps, LoopPort port,
                             Hooks hooks)
    : config_(config), tokenizer_(tokenizer), task_(task), dispatcher_(dispatcher), workers_(workers), ledger_(ledger),
      metrics_(metrics), rewards_(rewards), steps_(steps), port_(std::move(port)), hooks_(std::move(hooks)) {}

Status EpisodeRunner::start(const PromptFormat& format, const std::vector<int32_t>& stop_ids) {
  const TaskSection& t = config_.task;
  if (t.environment_url.empty()) return Status();
  orchestrator::openai::ServedModel model("policy", tokenizer_);
  model.stop_ids = stop_ids;
  if (format.is_chat())
    model.render_chat = [format](const nlohmann::ordered_json& messages) { return format.chat_text(messages); };
  model.max_model_len = config_.max_model_len;
  model.vocab_size = tokenizer_.vocab_size();
  GatewayOptions g;
  g.bind = t.environment_gateway_bind;
  g.request_timeout_seconds = t.environment_timeout_seconds;
  g.max_calls = t.environment_max_calls;
  g.seed = static_cast<uint64_t>(config_.seed);
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<EpisodeGateway> gateway, EpisodeGateway::start(g, std::move(model)));
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<EpisodeClient> client,
                         EpisodeClient::create({t.environment_url, t.environment_timeout_seconds}));
  start(std::move(gateway), std::move(client));
  log::info(str("environment ", t.environment_url, ": its episodes call the run's OpenAI endpoint http://",
                stats_.gateway, "/sessions/<session>/v1",
                t.environment_field.empty() ? "" : str(" (rows with the field `", t.environment_field, "`)")));
  return Status();
}

void EpisodeRunner::start(std::unique_ptr<EpisodeGateway> gateway, std::unique_ptr<EpisodeEnvironment> environment) {
  gateway_ = std::move(gateway);
  environment_ = std::move(environment);
  stats_.url = config_.task.environment_url;
  stats_.gateway = gateway_->address();
}

bool EpisodeRunner::runs(const Problem& problem) const {
  if (gateway_ == nullptr) return false;
  const std::string& field = config_.task.environment_field;
  if (field.empty()) return true;
  const Json row = parsed_or(problem.metadata_json, Json());
  if (!row.is_object()) return false;
  const auto it = row.find(field);
  return it != row.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>());
}

void EpisodeRunner::start_group(uint64_t group) {
  for (uint32_t i = 0; i < dispatcher_.group_size(); ++i) start_attempt(Episode{group, i, std::nullopt, 0, 0, 0});
}

void EpisodeRunner::start_eval(uint64_t problem) { start_attempt(Episode{0, 0, problem, 0, 0, 0}); }

void EpisodeRunner::start_attempt(Episode e) {
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
  e.version = steps_.version();  // every attempt: the weights of the moment
  const EpisodeGateway::Opened session = gateway_->open(e.version, sampling);
  e.session = session.id;
  if (e.attempt++ == 0) ++stats_.started;
  ++stats_.attempts;
  const std::string name = eval ? str("eval-", *e.eval_problem) : str(dispatcher_.sample_id(e.group, e.index));
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
  const uint64_t key = next_key_++;
  environment_->start(key, body.dump(-1, ' ', false, Json::error_handler_t::replace));
  running_.emplace(key, e);
}

void EpisodeRunner::route_calls() {
  for (auto& [worker, ids] : gateway_->take_cancels()) {
    Cancel cancel;
    cancel.request_ids = std::move(ids);
    cancel.reason = "episode_call_cancelled";
    (void)port_.send_to(workers_[worker].name, cancel);
  }
  std::vector<int> serving;
  for (size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i].serves()) serving.push_back(static_cast<int>(i));
  if (serving.empty()) return;  // calls wait (their HTTP clients time out at environment_timeout_seconds)
  for (EpisodeGateway::Call& call : gateway_->take_calls()) {
    const int w = serving[next_call_worker_++ % serving.size()];
    if (Status s = hooks_.send_request(w, call.request); !s.ok())
      log::warn(str("episode call to ", workers_[w].name, ": ", s.message()));
    gateway_->sent(call.request_id, w);
  }
}

Status EpisodeRunner::poll() {
  if (gateway_ == nullptr) return Status();
  route_calls();
  for (EpisodeEnd& end : environment_->poll()) {
    auto it = running_.find(end.key);
    if (it == running_.end()) continue;
    Episode e = it->second;
    running_.erase(it);
    EpisodeGateway::Closed closed = gateway_->close(e.session);
    stats_.calls += closed.calls;
    if (end.ok) {
      metrics_.episodes->Add({{"outcome", "completed"}}).Increment();
      done(e, end.reply, std::move(closed));
      continue;
    }
    const std::string what = e.eval_problem ? str("evaluation episode ", *e.eval_problem)
                                            : str("episode ", dispatcher_.sample_id(e.group, e.index));
    failure_log_.write(log::Level::kWarn, str(what, " attempt ", e.attempt, " failed: ", end.error));
    if (e.attempt < config_.task.environment_max_attempts) {
      ++stats_.retried;
      metrics_.episodes->Add({{"outcome", "retried"}}).Increment();
      start_attempt(e);
      continue;
    }
    ++stats_.failed;
    metrics_.episodes->Add({{"outcome", "failed"}}).Increment();
    if (stats_.failures.size() < Stats::kMaxListed)
      stats_.failures.push_back(str(what, ": ", end.error, " (", e.attempt, " attempts)"));
    lost(e, "episode_failed", false);
    if (stats_.failed >= config_.task.environment_max_failed_episodes)
      return unavailable(str(stats_.failed, " episodes failed every one of their ", config_.task.environment_max_attempts,
                             " attempts (task.environment_max_failed_episodes = ",
                             config_.task.environment_max_failed_episodes, "): the environment server ",
                             config_.task.environment_url, " is not working; the last: ", end.error,
                             ". Fix the server (summary.json lists the failures) and --resume"));
  }
  route_calls();
  metrics_.episodes_running->Set(static_cast<double>(running_.size()));
  return Status();
}

void EpisodeRunner::done(const Episode& e, const EpisodeReply& reply, EpisodeGateway::Closed closed) {
  ++stats_.completed;
  stats_.turns += static_cast<int64_t>(closed.turns.size());
  stats_.exact_turns += closed.spliced;
  stats_.retokenized_differ += closed.retokenized_differ;
  rewards_.note_logs(reply.metrics);
  if (e.eval_problem) return hooks_.evaluated(*e.eval_problem, reply.has_correct ? reply.correct : reply.reward >= 1.0);
  std::vector<EpisodeSegment> segments = episode_segments(closed.turns);
  if (segments.empty()) return lost(e, "episode_no_turns", false);
  Group* group = dispatcher_.episode_returned(e.group, e.index);
  if (group == nullptr) return;
  Dispatcher::Sample& s = group->samples[e.index];
  ledger_.generated(dispatcher_.sample_id(e.group, e.index));
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
  stats_.sequences += static_cast<int64_t>(s.segments.size());
  if (dispatcher_.is_complete(*group)) hooks_.complete(dispatcher_.complete(group->id));
}

void EpisodeRunner::lost(const Episode& e, const std::string& reason, bool cancelled) {
  if (e.eval_problem) return hooks_.evaluated(*e.eval_problem, false);  // counts as wrong
  Group* group = dispatcher_.episode_returned(e.group, e.index);
  if (group == nullptr) return;
  const uint64_t id = dispatcher_.sample_id(e.group, e.index);
  if (cancelled) {
    ledger_.cancelled(id);
    metrics_.cancelled->Increment();
  } else {
    ledger_.discarded(id, reason);
    metrics_.count_discard(reason);
  }
  group->failed = true;
  if (dispatcher_.is_complete(*group)) hooks_.complete(dispatcher_.complete(group->id));
}

void EpisodeRunner::cancel_off_policy(const std::function<bool(uint64_t version)>& off_policy) {
  if (gateway_ == nullptr) return;
  for (auto it = running_.begin(); it != running_.end();) {
    const Episode e = it->second;
    if (e.eval_problem || !off_policy(e.version)) {
      ++it;
      continue;
    }
    environment_->abandon(it->first);
    it = running_.erase(it);
    stats_.calls += gateway_->close(e.session).calls;
    ++stats_.cancelled;
    metrics_.episodes->Add({{"outcome", "cancelled"}}).Increment();
    lost(e, "off_policy", true);
  }
}

bool EpisodeRunner::on_result(const GenerateResult& result) { return gateway_ != nullptr && gateway_->on_result(result); }

void EpisodeRunner::requeue_worker(int worker) {
  if (gateway_ != nullptr) gateway_->requeue_worker(worker);
}

int64_t EpisodeRunner::calls_on(int worker) const { return gateway_ != nullptr ? gateway_->calls_on(worker) : 0; }

void EpisodeRunner::note_trained(int64_t policy_tokens, int64_t environment_tokens) {
  stats_.policy_tokens += policy_tokens;
  stats_.environment_tokens += environment_tokens;
}

void EpisodeRunner::finish() {
  if (gateway_ == nullptr) return;
  for (const auto& [key, e] : running_) {
    environment_->abandon(key);
    stats_.calls += gateway_->close(e.session).calls;
  }
  stats_.in_flight_at_exit = static_cast<int64_t>(running_.size());
  running_.clear();
  gateway_->shut_down();  // the environment's calls still waiting end now
}

}  // namespace rlrun::orchestrator
