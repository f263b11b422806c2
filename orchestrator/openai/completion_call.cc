// completion_call.cc - submit the choices, collect their tokens, answer whole or streamed.
#include "orchestrator/openai/completion_call.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>

#include "common/check.h"
#include "common/observe/log.h"
#include "orchestrator/openai/choice_text.h"

namespace rlrun::orchestrator::openai {

namespace {

using Clock = std::chrono::steady_clock;

// What the engine sent for one choice since the HTTP thread last looked.
struct Arrived {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::optional<rollout::SampleOutput> finished;
};

// The request's GenerationSink: the engine thread stores, the HTTP thread takes.
class CallSink : public rollout::GenerationSink {
 public:
  CallSink(uint64_t first_id, size_t choices) : first_id_(first_id), arrived_(choices) {}

  void on_tokens(std::span<const rollout::StreamedToken> tokens) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const rollout::StreamedToken& t : tokens) {
        Arrived& a = at(t.request_id);
        a.ids.push_back(t.token);
        a.logprobs.push_back(t.logprob);
      }
      any_ = true;
    }
    cv_.notify_one();
  }
  void on_finished(rollout::SampleOutput out) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      at(out.request_id).finished = std::move(out);
      any_ = true;
    }
    cv_.notify_one();
  }
  // Moves what arrived into *taken (one entry per choice); false when nothing came by `deadline`.
  bool wait(Clock::time_point deadline, std::vector<Arrived>* taken) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return any_; })) return false;
    taken->assign(arrived_.size(), Arrived{});
    taken->swap(arrived_);
    any_ = false;
    return true;
  }

 private:
  Arrived& at(uint64_t request_id) {
    RLRUN_CHECK(request_id >= first_id_ && request_id - first_id_ < arrived_.size(), "result for a request not in this call");
    return arrived_[request_id - first_id_];
  }

  const uint64_t first_id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Arrived> arrived_;  // guarded by mu_
  bool any_ = false;
};

struct ChoiceState {
  ChoiceText text;
  const char* finish = nullptr;
  bool done = false;
  bool sent_first = false;  // streams: the first chunk (role, prompt_token_ids) went out
  bool sent_last = false;   // streams: the chunk with finish_reason went out
  size_t sent_ids = 0;      // streams: token ids already in chunks
};

class Call {
 public:
  Call(const CallSpec& spec, rollout::Generator& generator) : spec_(spec), generator_(generator) {
    const size_t choices = spec.prompts.size() * static_cast<size_t>(spec.params.n);
    for (size_t c = 0; c < choices; ++c) states_.push_back({ChoiceText(spec.model->tokenizer, spec.params.stop)});
    sink_ = std::make_shared<CallSink>(spec.first_request_id, choices);
  }

  void run(HttpResponder& out) {
    if (std::optional<ApiError> e = submit()) return send_error(out, *e);
    const bool stream = spec_.params.stream;
    if (stream && !(out.begin_stream(200, "text/event-stream") && send_chunks(out))) return cancel_unfinished();
    std::vector<Arrived> arrived;
    while (!all_done()) {
      if (!sink_->wait(spec_.deadline, &arrived)) {
        cancel_unfinished();
        return fail(out, ApiError{504, "the request timed out before generation finished", "timeout", "", "timeout"});
      }
      absorb(arrived);
      if (error_) {
        cancel_unfinished();
        return fail(out, *error_);
      }
      if (stream && !send_chunks(out)) return cancel_unfinished();  // the client is gone
    }
    if (!stream) {
      out.send(200, "application/json", dump_json(completion_body(spec_.head, results(), usage(), spec_.model->tokenizer)));
      return;
    }
    if (spec_.params.include_usage) write_event(out, dump_json(usage_chunk_body(spec_.head, usage())));
    write_event(out, "[DONE]");
  }

 private:
  size_t prompt_of(size_t c) const { return c / static_cast<size_t>(spec_.params.n); }

  std::optional<ApiError> submit() {
    const uint64_t seed = spec_.params.seed ? *spec_.params.seed : std::random_device{}();
    for (size_t c = 0; c < states_.size(); ++c) {
      rollout::GenerationRequest r;
      r.request_id = spec_.first_request_id + c;
      r.prompt = spec_.prompts[prompt_of(c)];
      r.first_sample_index = static_cast<uint32_t>(c % static_cast<size_t>(spec_.params.n));
      r.sampling = {spec_.params.temperature, spec_.params.top_p};
      r.max_tokens = spec_.max_tokens;
      r.stop_token_ids = spec_.model->stop_ids;
      r.seed = seed;
      r.tag = spec_.tag;
      r.stream = spec_.params.stream || !spec_.params.stop.empty();  // stop strings are matched as tokens come
      if (Status s = generator_.submit(std::move(r), sink_); !s.ok()) {
        for (size_t k = 0; k < c; ++k) generator_.cancel(spec_.first_request_id + k);
        const bool full = s.code() == StatusCode::kResourceExhausted;
        return ApiError{full ? 429 : 503, s.message(), full ? "rate_limit_error" : "server_error", "", ""};
      }
    }
    return std::nullopt;
  }

  void absorb(std::vector<Arrived>& arrived) {
    for (size_t c = 0; c < states_.size(); ++c) {
      ChoiceState& s = states_[c];
      Arrived& a = arrived[c];
      if (s.done) continue;
      if (s.text.append(a.ids, a.logprobs)) {  // a stop string: the rest of the choice is not wanted
        generator_.cancel(spec_.first_request_id + c);
        s.finish = "stop";
        s.done = true;
        continue;
      }
      if (!a.finished) continue;
      rollout::SampleOutput& o = *a.finished;
      if (o.finish_reason == FinishReason::kError) {
        error_ = ApiError{500, str("generation failed: ", o.error), "server_error", "", ""};
      } else if (o.finish_reason == FinishReason::kCancelled) {
        error_ = ApiError{503, "generation was cancelled: the server is stopping", "server_error", "", ""};
      }
      const size_t have = s.text.ids().size();  // tokens not streamed (all of them without stream)
      const bool stopped = o.tokens.size() > have &&
                           s.text.append(std::span<const int32_t>(o.tokens).subspan(have),
                                         std::span<const float>(o.logprobs).subspan(have));
      s.finish = stopped || o.finish_reason != FinishReason::kLength ? "stop" : "length";
      s.done = true;
    }
  }

  bool all_done() const {
    return std::all_of(states_.begin(), states_.end(), [](const ChoiceState& s) { return s.done; });
  }

  void cancel_unfinished() {
    for (size_t c = 0; c < states_.size(); ++c) {
      if (!states_[c].done) generator_.cancel(spec_.first_request_id + c);
    }
  }

  // Streams one chunk per choice that has something new. False when the client is gone.
  bool send_chunks(HttpResponder& out) {
    for (size_t c = 0; c < states_.size(); ++c) {
      ChoiceState& s = states_[c];
      if (s.sent_last) continue;
      ChoiceResult r;
      r.index = static_cast<int64_t>(c);
      r.text = s.text.take_delta(s.done);
      const auto& ids = s.text.ids();
      r.token_ids.assign(ids.begin() + static_cast<long>(s.sent_ids), ids.end());
      if (spec_.params.logprobs)
        r.logprobs.assign(s.text.logprobs().begin() + static_cast<long>(s.sent_ids), s.text.logprobs().end());
      if (!s.sent_first) r.prompt_ids = spec_.prompts[prompt_of(c)];
      r.finish_reason = s.done ? s.finish : nullptr;
      if (s.sent_first && !s.done && r.text.empty() && r.token_ids.empty()) continue;
      if (!write_event(out, dump_json(chunk_body(spec_.head, r, !s.sent_first, spec_.model->tokenizer)))) return false;
      s.sent_first = true;
      s.sent_last = s.done;
      s.sent_ids = ids.size();
    }
    return true;
  }

  static bool write_event(HttpResponder& out, const std::string& data) { return out.write(str("data: ", data, "\n\n")); }

  // An error after the request was accepted: a stream has already sent 200, so it gets an error
  // event (then [DONE]); others get the error object.
  void fail(HttpResponder& out, const ApiError& error) {
    if (!spec_.params.stream) return send_error(out, error);
    write_event(out, dump_json(error_body(error)));
    write_event(out, "[DONE]");
  }

  std::vector<ChoiceResult> results() const {
    std::vector<ChoiceResult> list;
    for (size_t c = 0; c < states_.size(); ++c) {
      const ChoiceState& s = states_[c];
      ChoiceResult r;
      r.index = static_cast<int64_t>(c);
      r.text = s.text.text();
      r.prompt_ids = spec_.prompts[prompt_of(c)];
      r.token_ids = s.text.ids();
      if (spec_.params.logprobs) r.logprobs = s.text.logprobs();
      r.finish_reason = s.finish;
      list.push_back(std::move(r));
    }
    return list;
  }

  Usage usage() const {
    Usage u;
    for (const auto& p : spec_.prompts) u.prompt_tokens += static_cast<int64_t>(p.size());
    for (const ChoiceState& s : states_) u.completion_tokens += static_cast<int64_t>(s.text.ids().size());
    return u;
  }

  const CallSpec& spec_;
  rollout::Generator& generator_;
  std::shared_ptr<CallSink> sink_;
  std::vector<ChoiceState> states_;
  std::optional<ApiError> error_;
};

}  // namespace

void run_completion_call(const CallSpec& spec, rollout::Generator& generator, HttpResponder& out) {
  Call(spec, generator).run(out);
}

}  // namespace rlrun::orchestrator::openai
