// endpoint.h - OpenAI's API for one model over a Generator:
//
//   POST /v1/completions        prompt text or token ids -> text, token ids, log-probs
//   POST /v1/chat/completions   messages, rendered with the model's chat template
//   GET  /v1/models             the served model
//   GET  /health                200 "ok"
//
// A request becomes one GenerationRequest per choice (prompts x n; choice i of a prompt samples
// with SampleRng(seed, i), so a seeded request is reproducible however it was batched), submitted
// to the Generator, whose engine batches them with every other request in flight. The HTTP thread
// then waits, at most request_timeout_seconds, for the tokens: a stream (`stream: true`) gets
// Server-Sent Events as tokens are produced (`data: {chunk}\n\n` ... `data: [DONE]\n\n`), other
// requests one JSON body. Stop strings are matched on the decoded text as tokens arrive and cancel
// the choice's generation at once.
//
// Every bad request gets OpenAI's error object ({"error": {"message", "type", "param", "code"}})
// and a status: 400 invalid field or JSON (context_length_exceeded for a prompt + max_tokens over
// max_model_len), 404 unknown model or path, 405 wrong method, 413 body over max_body_bytes, 429
// engine queue full, 503 stopping, 504 timeout, 500 engine failure.
//
// Threads: handle() runs concurrently on the HTTP server's threads. The Generator must outlive the
// endpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/openai/api_request.h"
#include "orchestrator/openai/http_server.h"
#include "rollout/generator.h"

namespace rlrun::orchestrator::openai {

// The model the endpoint serves, seen from the text side.
struct ServedModel {
  ServedModel(std::string model_id, engine::Tokenizer model_tokenizer)
      : id(std::move(model_id)), tokenizer(std::move(model_tokenizer)) {}

  std::string id;  // what requests name in `model`; GET /v1/models lists it
  engine::Tokenizer tokenizer;
  // The chat's prompt text: HF apply_chat_template(messages, add_generation_prompt=True). Empty
  // when the model has no chat template: chat completions are then refused (400).
  std::function<Result<std::string>(const nlohmann::ordered_json& messages)> render_chat;
  std::vector<int32_t> stop_ids;  // end every completion (eos, the template's end of turn)
  int64_t max_model_len = 0;      // prompt + completion tokens
  int32_t vocab_size = 0;         // prompt ids must be below it
};

// A call made inside a session (the run's episode gateway, orchestrator/env/gateway.h): one prompt,
// one choice, sampled as the session says whatever the request asks, its prompt ids made exact.
struct SessionCall {
  uint64_t tag = 0;                   // rollout::GenerationRequest::tag of the call
  float temperature = 1.0f, top_p = 1.0f;  // replace the request's (0: greedy)
  int64_t max_tokens = 0;             // the most a completion may have; 0: up to max_model_len
  uint64_t seed = 0;                  // replaces the request's
  // The prompt's ids as the model is to read them (the session's recorded tokens where the
  // prompt's text repeats them); called once per call, on the HTTP thread.
  std::function<std::vector<int32_t>(std::vector<int32_t>)> exact_prompt;
};

struct EndpointOptions {
  ParseLimits limits;
  size_t max_body_bytes = size_t{8} << 20;
  double request_timeout_seconds = 600;
  int64_t default_max_tokens = 16;  // completions without max_tokens (OpenAI's default)
};

class OpenAiEndpoint : public HttpHandler {
 public:
  OpenAiEndpoint(ServedModel model, rollout::Generator& generator, const EndpointOptions& options);

  void handle(const HttpRequest& request, HttpResponder& out) override { handle(request, out, nullptr); }
  // As handle(); with `session`, completions are made as SessionCall says (n and batches refused).
  void handle(const HttpRequest& request, HttpResponder& out, const SessionCall* session);
  size_t max_body_bytes() const override { return options_.max_body_bytes; }
  const ServedModel& model() const { return model_; }

 private:
  void handle_completion(ApiKind kind, const HttpRequest& request, HttpResponder& out, const SessionCall* session);
  // The prompts' token ids (chat template applied) and the max_tokens of each choice, checked
  // against the vocabulary and max_model_len.
  std::optional<ApiError> prepare(const CompletionParams& params, const SessionCall* session,
                                  std::vector<std::vector<int32_t>>* prompts, int64_t* max_tokens) const;

  const ServedModel model_;
  rollout::Generator& generator_;
  const EndpointOptions options_;
  const int64_t created_;               // Unix seconds, for /v1/models
  std::atomic<uint64_t> next_id_{1};    // rollout::GenerationRequest ids, one per choice
};

// Sends `error` as OpenAI's error object with its HTTP status.
void send_error(HttpResponder& out, const ApiError& error);

}  // namespace rlrun::orchestrator::openai
