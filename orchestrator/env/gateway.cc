// gateway.cc - sessions, calls queued for the orchestrator, results back to the HTTP threads.
#include "orchestrator/env/gateway.h"

#include <algorithm>
#include <random>

#include "common/observe/log.h"
#include "common/splitmix.h"

namespace rlrun::orchestrator {

namespace {

using rollout::GenerationSink;
using rollout::SampleOutput;
namespace oai = orchestrator::openai;

std::string random_token() {
  std::random_device rd;
  std::string token;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int k = 0; k < 8; ++k, v >>= 4) token += kHex[v & 15];
  }
  return token;  // 128 bits: not guessable by a stranger who reaches the port
}

SampleOutput cancelled_output(uint64_t endpoint_id, uint32_t sample_index) {
  SampleOutput out;
  out.request_id = endpoint_id;
  out.sample_index = sample_index;
  out.finish_reason = FinishReason::kCancelled;
  return out;
}

}  // namespace

EpisodeGateway::EpisodeGateway(GatewayOptions options, oai::ServedModel model)
    : options_(std::move(options)), tokenizer_(model.tokenizer) {
  oai::EndpointOptions endpoint;
  endpoint.request_timeout_seconds = options_.request_timeout_seconds;
  endpoint_ = std::make_unique<oai::OpenAiEndpoint>(std::move(model), *this, endpoint);
}

EpisodeGateway::~EpisodeGateway() {
  shut_down();     // calls still waiting end now, not at their timeout
  server_.reset();  // no HTTP thread runs past here
}

Result<std::unique_ptr<EpisodeGateway>> EpisodeGateway::start(GatewayOptions options, oai::ServedModel model) {
  std::unique_ptr<EpisodeGateway> g(new EpisodeGateway(std::move(options), std::move(model)));
  oai::HttpServerOptions http;
  http.bind = g->options_.bind;
  http.bind_flag = "task.environment_gateway_bind";
  http.threads = g->options_.http_threads;
  RLRUN_ASSIGN_OR_RETURN(g->server_, oai::HttpServer::start(http, *g));
  return g;
}

std::unique_ptr<EpisodeGateway> EpisodeGateway::unserved(GatewayOptions options, oai::ServedModel model) {
  return std::unique_ptr<EpisodeGateway>(new EpisodeGateway(std::move(options), std::move(model)));
}

std::string EpisodeGateway::address() const { return server_ != nullptr ? server_->address() : options_.bind; }

EpisodeGateway::Opened EpisodeGateway::open(uint64_t version, SessionSampling sampling) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_session_++;
  Session& s = sessions_[id];
  s.token = random_token();
  s.version = version;
  s.sampling = sampling;
  by_token_[s.token] = id;
  return Opened{id, str("http://", address(), "/sessions/", s.token, "/v1")};
}

EpisodeGateway::Closed EpisodeGateway::close(uint64_t session) {
  Closed closed;
  std::vector<std::pair<std::shared_ptr<GenerationSink>, SampleOutput>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return closed;
    Session& s = it->second;
    closed.turns = std::move(s.turns);
    closed.calls = s.calls;
    closed.spliced = s.spliced;
    closed.retokenized_differ = s.retokenized_differ;
    by_token_[s.token] = 0;  // known, and over: 409
    ended_tokens_.push_back(s.token);
    if (ended_tokens_.size() > kRememberedEnded) {
      by_token_.erase(ended_tokens_.front());
      ended_tokens_.pop_front();
    }
    sessions_.erase(it);
    for (auto c = calls_.begin(); c != calls_.end();) {
      Pending& p = c->second;
      if (p.session != session) {
        ++c;
      } else if (p.worker < 0) {
        ended.emplace_back(p.sink, cancelled_output(p.endpoint_id, p.request.first_sample_index));
        c = calls_.erase(c);
      } else {
        p.cancel_wanted = true;
        ++c;
      }
    }
  }
  for (auto& [sink, out] : ended) sink->on_finished(std::move(out));
  return closed;
}

size_t EpisodeGateway::open_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

void EpisodeGateway::shut_down() {
  std::vector<std::pair<std::shared_ptr<GenerationSink>, SampleOutput>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    for (auto& [id, s] : sessions_) by_token_[s.token] = 0;
    sessions_.clear();
    for (auto& [id, p] : calls_) ended.emplace_back(p.sink, cancelled_output(p.endpoint_id, p.request.first_sample_index));
    calls_.clear();
    to_send_.clear();
  }
  for (auto& [sink, out] : ended) sink->on_finished(std::move(out));
}

std::vector<EpisodeGateway::Call> EpisodeGateway::take_calls() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Call> out;
  for (uint64_t id : to_send_) {
    auto it = calls_.find(id);
    if (it != calls_.end() && it->second.worker < 0 && !it->second.cancel_wanted) out.push_back({id, it->second.request});
  }
  to_send_.clear();
  return out;
}

void EpisodeGateway::sent(uint64_t request_id, int worker) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = calls_.find(request_id); it != calls_.end()) it->second.worker = worker;
}

std::map<int, std::vector<uint64_t>> EpisodeGateway::take_cancels() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, std::vector<uint64_t>> out;
  for (auto& [id, p] : calls_) {
    if (p.cancel_wanted && !p.cancel_sent && p.worker >= 0) {
      out[p.worker].push_back(id);
      p.cancel_sent = true;
    }
  }
  return out;
}

int64_t EpisodeGateway::calls_on(int worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(calls_.begin(), calls_.end(), [&](const auto& c) { return c.second.worker == worker; });
}

void EpisodeGateway::requeue_worker(int worker) {
  std::vector<std::pair<std::shared_ptr<GenerationSink>, SampleOutput>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto c = calls_.begin(); c != calls_.end();) {
      Pending& p = c->second;
      if (p.worker != worker) {
        ++c;
      } else if (p.cancel_wanted) {
        ended.emplace_back(p.sink, cancelled_output(p.endpoint_id, p.request.first_sample_index));
        c = calls_.erase(c);
      } else {
        p.worker = -1;  // the same request again: same seed, same tokens
        to_send_.push_back(c->first);
        ++c;
      }
    }
  }
  for (auto& [sink, out] : ended) sink->on_finished(std::move(out));
}

bool EpisodeGateway::on_result(const GenerateResult& result) {
  if (!is_call(result.request_id)) return false;
  Pending call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(result.request_id);
    if (it == calls_.end()) return true;  // a cancelled call's late answer
    call = std::move(it->second);
    calls_.erase(it);
    const bool finished = result.finish_reason == FinishReason::kStop || result.finish_reason == FinishReason::kLength;
    if (auto s = sessions_.find(call.session); finished && s != sessions_.end() && !result.token_ids.empty())
      s->second.turns.push_back(Turn{call.prompt, std::vector<int32_t>(result.token_ids.begin(), result.token_ids.end()),
                                     std::vector<float>(result.logprobs.begin(), result.logprobs.end()),
                                     result.first_weight_version});
  }
  SampleOutput out;
  out.request_id = call.endpoint_id;
  out.sample_index = result.sample_index;
  out.tokens.assign(result.token_ids.begin(), result.token_ids.end());
  out.logprobs.assign(result.logprobs.begin(), result.logprobs.end());
  out.weight_versions.assign(result.weight_versions.begin(), result.weight_versions.end());
  out.finish_reason = result.finish_reason;
  out.error = result.error;
  out.preemptions = result.preemptions;
  out.queue_seconds = result.queue_seconds;
  out.prefill_seconds = result.prefill_seconds;
  out.decode_seconds = result.decode_seconds;
  if (call.stream && !out.tokens.empty()) {  // the worker answers whole: the stream gets it at once
    std::vector<rollout::StreamedToken> tokens;
    for (size_t i = 0; i < out.tokens.size(); ++i)
      tokens.push_back({call.endpoint_id, out.sample_index, out.tokens[i], i < out.logprobs.size() ? out.logprobs[i] : 0.0f});
    call.sink->on_tokens(tokens);
  }
  call.sink->on_finished(std::move(out));
  return true;
}

Status EpisodeGateway::submit(rollout::GenerationRequest request, std::shared_ptr<GenerationSink> sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return unavailable("the run is ending: no more completions are served");
  uint64_t version = 0;
  if (request.tag != 0) {
    auto s = sessions_.find(request.tag);
    if (s == sessions_.end()) return unavailable("the session ended (its episode is over); start a new episode");
    version = s->second.version;
  }
  if (static_cast<int64_t>(to_send_.size()) >= options_.max_queued)
    return resource_exhausted(str("busy: ", to_send_.size(), " calls are waiting for a rollout worker; retry"));
  Pending p;
  p.session = request.tag;
  p.endpoint_id = request.request_id;
  p.stream = request.stream;
  p.sink = std::move(sink);
  GenerateRequest& g = p.request;
  g.request_id = request.request_id | kRequestIdBit;
  g.prompt_ids = request.prompt;
  g.num_samples = request.num_samples;
  g.first_sample_index = request.first_sample_index;
  g.temperature = request.sampling.temperature;
  g.top_p = request.sampling.top_p;
  g.max_tokens = static_cast<uint32_t>(std::max<int64_t>(0, request.max_tokens));
  g.stop_token_ids = request.stop_token_ids;
  g.seed = request.seed;
  g.min_weight_version = version;
  p.prompt = std::move(request.prompt);
  const uint64_t id = g.request_id;
  calls_[id] = std::move(p);
  to_send_.push_back(id);
  return Status();
}

void EpisodeGateway::cancel(uint64_t request_id) {
  std::shared_ptr<GenerationSink> sink;
  SampleOutput out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(request_id | kRequestIdBit);
    if (it == calls_.end()) return;
    Pending& p = it->second;
    if (p.worker >= 0) {
      p.cancel_wanted = true;
      return;
    }
    sink = p.sink;
    out = cancelled_output(p.endpoint_id, p.request.first_sample_index);
    calls_.erase(it);
  }
  sink->on_finished(std::move(out));
}

std::vector<int32_t> EpisodeGateway::exact_prompt(uint64_t session, std::vector<int32_t> ids) {
  std::vector<int32_t> recorded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = sessions_.find(session);
    if (s == sessions_.end() || s->second.turns.empty()) return ids;
    const Turn& last = s->second.turns.back();
    recorded = last.prompt;
    recorded.insert(recorded.end(), last.completion.begin(), last.completion.end());
  }
  const auto decode = [&](const std::vector<int32_t>& v) -> std::optional<std::string> {
    engine::DecodeOptions keep;  // special tokens kept, raw bytes
    keep.skip_special_tokens = false;
    keep.lossy_utf8 = false;
    Result<std::string> text = tokenizer_.decode(v, keep);
    return text.ok() ? std::optional<std::string>(std::move(*text)) : std::nullopt;
  };
  const auto encode = [&](const std::string& text) { return tokenizer_.encode(text); };
  std::optional<std::vector<int32_t>> exact = splice_recorded_prefix(recorded, ids, decode, encode);
  std::lock_guard<std::mutex> lock(mu_);
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return ids;
  if (!exact) {
    if (ids.size() > recorded.size() && std::equal(recorded.begin(), recorded.end(), ids.begin())) ++s->second.spliced;
    return ids;
  }
  ++s->second.spliced;
  ++s->second.retokenized_differ;
  return std::move(*exact);
}

void EpisodeGateway::handle(const oai::HttpRequest& request, oai::HttpResponder& out) {
  constexpr std::string_view kPrefix = "/sessions/";
  if (!request.path.starts_with(kPrefix)) return endpoint_->handle(request, out, nullptr);
  const std::string_view rest = request.path.substr(kPrefix.size());
  const size_t slash = rest.find('/');
  const std::string token(rest.substr(0, slash));
  oai::HttpRequest inner{request.method, slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash),
                         request.body, request.body_too_large};
  oai::SessionCall call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto known = by_token_.find(token);
    if (known == by_token_.end())
      return oai::send_error(out, oai::ApiError{404, "no such session: use the base_url rlrun gave for the episode",
                                                "invalid_request_error", "", "session_not_found"});
    auto s = sessions_.find(known->second);
    if (s == sessions_.end())
      return oai::send_error(out, oai::ApiError{409, "this session's episode is over (it ended, timed out, or fell past "
                                                "the run's staleness bound); its calls are no longer served",
                                                "invalid_request_error", "", "session_expired"});
    Session& session = s->second;
    const bool completion = inner.path == "/v1/completions" || inner.path == "/v1/chat/completions";
    if (completion && session.calls >= options_.max_calls)
      return oai::send_error(out, oai::ApiError{429, str("this episode made task.environment_max_calls = ", options_.max_calls,
                                                         " calls; no more are served"),
                                                "rate_limit_error", "", "max_calls"});
    if (completion) ++session.calls;
    call.tag = known->second;
    call.temperature = session.sampling.temperature;
    call.top_p = session.sampling.top_p;
    call.max_tokens = session.sampling.max_tokens;
    const uint64_t base = session.sampling.seed != 0 ? session.sampling.seed : splitmix64(known->second);
    call.seed = splitmix64(options_.seed ^ base ^ static_cast<uint64_t>(session.calls));
  }
  const uint64_t id = call.tag;
  call.exact_prompt = [this, id](std::vector<int32_t> ids) { return exact_prompt(id, std::move(ids)); };
  endpoint_->handle(inner, out, &call);
}

}  // namespace rlrun::orchestrator
