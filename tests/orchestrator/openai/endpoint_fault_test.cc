// The endpoint over Generators that misbehave (injected through the interface, no HTTP server):
// an engine that never answers (504 after request_timeout_seconds, and the choices are
// cancelled), a full queue (429, nothing left queued), a failing engine (500), a client that
// goes away mid-stream (the choices are cancelled).
#include <gtest/gtest.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "orchestrator/openai/endpoint.h"

namespace rlrun::orchestrator::openai {
namespace {

using rollout::GenerationRequest;
using rollout::GenerationSink;
using rollout::Generator;
using rollout::SampleOutput;
using rollout::StreamedToken;

using nlohmann::json;

// Answers as `mode` says; records what it was asked.
class FakeGenerator : public Generator {
 public:
  enum class Mode { kSilent, kFull, kFailAfterOneToken };
  explicit FakeGenerator(Mode mode) : mode_(mode) {}

  Status submit(GenerationRequest request, std::shared_ptr<GenerationSink> sink) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_ == Mode::kFull && !submitted_.empty()) return resource_exhausted("queue full");
    submitted_.insert(request.request_id);
    if (mode_ == Mode::kFailAfterOneToken) {
      const StreamedToken t{request.request_id, 0, 7, -0.5f};
      sink->on_tokens({&t, 1});
      SampleOutput out;
      out.request_id = request.request_id;
      out.tokens = {7};
      out.logprobs = {-0.5f};
      out.finish_reason = FinishReason::kError;
      out.error = "device lost";
      sink->on_finished(std::move(out));
    }
    return {};
  }
  void cancel(uint64_t request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.insert(request_id);
  }
  std::set<uint64_t> submitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  std::set<uint64_t> cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  const Mode mode_;
  std::mutex mu_;
  std::set<uint64_t> submitted_, cancelled_;
};

// Collects the response; write() fails after `accept_writes` writes (a client that left).
class FakeResponder : public HttpResponder {
 public:
  explicit FakeResponder(int accept_writes = 1 << 30) : accept_writes_(accept_writes) {}
  bool send(int status, std::string_view, std::string_view body) override {
    status_ = status;
    body_ = body;
    return true;
  }
  bool begin_stream(int status, std::string_view) override {
    status_ = status;
    return true;
  }
  bool write(std::string_view bytes) override {
    if (accept_writes_-- <= 0) return false;
    body_ += bytes;
    return true;
  }
  int status_ = 0;
  std::string body_;

 private:
  int accept_writes_;
};

OpenAiEndpoint make_endpoint(Generator& generator, double timeout_seconds = 600) {
  auto tok = engine::Tokenizer::load(std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json");
  EXPECT_TRUE(tok.ok());
  ServedModel model("tiny", *tok);
  model.max_model_len = 64;
  model.vocab_size = 400;
  EndpointOptions options;
  options.request_timeout_seconds = timeout_seconds;
  return OpenAiEndpoint(std::move(model), generator, options);
}

void post(OpenAiEndpoint& endpoint, const json& body, FakeResponder& out) {
  HttpRequest request{"POST", "/v1/completions", body.dump()};
  endpoint.handle(request, out);
}

const json kBody = {{"model", "tiny"}, {"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"n", 3}};

TEST(EndpointFaults, AnEngineThatNeverAnswersTimesOutAndTheChoicesAreCancelled) {
  FakeGenerator gen(FakeGenerator::Mode::kSilent);
  OpenAiEndpoint endpoint = make_endpoint(gen, /*timeout_seconds=*/0.2);
  FakeResponder out;
  post(endpoint, kBody, out);
  EXPECT_EQ(out.status_, 504) << out.body_;
  EXPECT_EQ(json::parse(out.body_)["error"]["code"], "timeout");
  EXPECT_EQ(gen.submitted().size(), 3u);
  EXPECT_EQ(gen.cancelled(), gen.submitted());
}

TEST(EndpointFaults, AFullQueueGives429AndWithdrawsWhatWasQueued) {
  FakeGenerator gen(FakeGenerator::Mode::kFull);
  OpenAiEndpoint endpoint = make_endpoint(gen);
  FakeResponder out;
  post(endpoint, kBody, out);
  EXPECT_EQ(out.status_, 429) << out.body_;
  EXPECT_EQ(json::parse(out.body_)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(gen.cancelled(), gen.submitted());  // the one choice that got in is withdrawn
}

TEST(EndpointFaults, AnEngineErrorIs500OrAnErrorEventInAStream) {
  FakeGenerator gen(FakeGenerator::Mode::kFailAfterOneToken);
  OpenAiEndpoint endpoint = make_endpoint(gen);
  FakeResponder whole;
  post(endpoint, kBody, whole);
  EXPECT_EQ(whole.status_, 500) << whole.body_;
  EXPECT_NE(json::parse(whole.body_)["error"]["message"].get<std::string>().find("device lost"), std::string::npos);
  json stream = kBody;
  stream["stream"] = true;
  FakeResponder events;
  post(endpoint, stream, events);
  EXPECT_EQ(events.status_, 200);
  EXPECT_NE(events.body_.find("data: {\"error\":"), std::string::npos) << events.body_;
  EXPECT_EQ(events.body_.substr(events.body_.size() - 14), "data: [DONE]\n\n");
}

TEST(EndpointFaults, AClientLeavingAStreamCancelsItsChoices) {
  FakeGenerator gen(FakeGenerator::Mode::kSilent);
  OpenAiEndpoint endpoint = make_endpoint(gen);
  json stream = kBody;
  stream["stream"] = true;
  FakeResponder out(/*accept_writes=*/1);  // the first chunk goes out, then the client is gone
  post(endpoint, stream, out);
  EXPECT_EQ(gen.submitted().size(), 3u);
  EXPECT_EQ(gen.cancelled(), gen.submitted());
}

}  // namespace
}  // namespace rlrun::orchestrator::openai
