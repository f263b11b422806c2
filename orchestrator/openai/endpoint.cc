// endpoint.cc - routing, the model check, prompts, and the bounds every request must respect.
#include "orchestrator/openai/endpoint.h"

#include <chrono>

#include "common/observe/log.h"
#include "orchestrator/openai/api_response.h"
#include "orchestrator/openai/completion_call.h"

namespace rlrun::orchestrator::openai {

namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ApiError context_too_long(std::string message, std::string param) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), "context_length_exceeded"};
}

}  // namespace

void send_error(HttpResponder& out, const ApiError& error) {
  out.send(error.http_status, "application/json", dump_json(error_body(error)));
}

OpenAiEndpoint::OpenAiEndpoint(ServedModel model, rollout::Generator& generator, const EndpointOptions& options)
    : model_(std::move(model)), generator_(generator), options_(options), created_(unix_seconds()) {}

void OpenAiEndpoint::handle(const HttpRequest& request, HttpResponder& out, const SessionCall* session) {
  const auto wrong_method = [&](const char* allowed) {
    send_error(out, ApiError{405, str("method ", request.method, " is not allowed on ", request.path, "; use ", allowed),
                             "invalid_request_error", "", "method_not_allowed"});
  };
  const std::string_view path = request.path;
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (request.method != "POST") return wrong_method("POST");
    if (request.body_too_large)
      return send_error(out, ApiError{413, str("the request body is larger than ", options_.max_body_bytes, " bytes"),
                                      "invalid_request_error", "", "request_too_large"});
    return handle_completion(path == "/v1/completions" ? ApiKind::kCompletion : ApiKind::kChat, request, out, session);
  }
  if (path == "/v1/models" || path == "/health" || path.starts_with("/v1/models/")) {
    if (request.method != "GET") return wrong_method("GET");
    if (path == "/health") {
      out.send(200, "text/plain", "ok\n");
      return;
    }
    const Json list = models_body(model_.id, created_, model_.max_model_len);
    if (path == "/v1/models") {
      out.send(200, "application/json", dump_json(list));
    } else if (path.substr(std::string_view("/v1/models/").size()) == model_.id) {
      out.send(200, "application/json", dump_json(list["data"][0]));
    } else {
      send_error(out, ApiError{404, str("The model `", path.substr(11), "` does not exist; this server serves `", model_.id, "`"),
                               "invalid_request_error", "model", "model_not_found"});
    }
    return;
  }
  send_error(out, ApiError{404, str("no route for ", request.method, " ", path,
                                    "; try POST /v1/completions, POST /v1/chat/completions or GET /v1/models"),
                           "invalid_request_error", "", "not_found"});
}

void OpenAiEndpoint::handle_completion(ApiKind kind, const HttpRequest& request, HttpResponder& out,
                                       const SessionCall* session) {
  CallSpec spec;
  if (std::optional<ApiError> e = parse_completion_request(kind, request.body, options_.limits, &spec.params))
    return send_error(out, *e);
  if (session != nullptr) {
    if (spec.params.n != 1) return send_error(out, bad_request("a session's call has one choice: n must be 1", "n"));
    if (kind == ApiKind::kCompletion && spec.params.prompts.size() != 1)
      return send_error(out, bad_request("a session's call has one prompt, not a batch", "prompt"));
    spec.params.temperature = session->temperature;
    spec.params.top_p = session->top_p;
    spec.params.seed = session->seed;
    if (session->max_tokens > 0)
      spec.params.max_tokens = std::min(spec.params.max_tokens.value_or(session->max_tokens), session->max_tokens);
    spec.tag = session->tag;
  }
  if (spec.params.model != model_.id)
    return send_error(out, ApiError{404, str("The model `", spec.params.model, "` does not exist; this server serves `",
                                             model_.id, "` (GET /v1/models)"),
                                    "invalid_request_error", "model", "model_not_found"});
  if (std::optional<ApiError> e = prepare(spec.params, session, &spec.prompts, &spec.max_tokens))
    return send_error(out, *e);
  const size_t choices = spec.prompts.size() * static_cast<size_t>(spec.params.n);
  spec.model = &model_;
  spec.first_request_id = next_id_.fetch_add(choices);
  spec.head = {kind, str(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-", std::hex, spec.first_request_id), unix_seconds(),
               model_.id, spec.params.logprobs};
  spec.deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options_.request_timeout_seconds));
  run_completion_call(spec, generator_, out);
}

std::optional<ApiError> OpenAiEndpoint::prepare(const CompletionParams& params, const SessionCall* session,
                                                std::vector<std::vector<int32_t>>* prompts, int64_t* max_tokens) const {
  const char* param = params.kind == ApiKind::kChat ? "messages" : "prompt";
  if (params.kind == ApiKind::kChat) {
    if (!model_.render_chat)
      return bad_request(str("the model `", model_.id, "` has no chat template; use /v1/completions"), "messages");
    Result<std::string> text = model_.render_chat(params.messages);
    if (!text.ok()) return bad_request(str("the chat template cannot render these messages: ", text.status().message()), "messages");
    prompts->push_back(model_.tokenizer.encode(*text));
  }
  for (const PromptInput& p : params.prompts) {
    prompts->push_back(p.is_ids ? p.ids : model_.tokenizer.encode(p.text));
    for (int32_t id : prompts->back()) {
      if (id >= model_.vocab_size)
        return bad_request(str("prompt token id ", id, " is outside the vocabulary [0, ", model_.vocab_size, ")"), "prompt");
    }
  }
  if (session != nullptr && session->exact_prompt)
    for (std::vector<int32_t>& ids : *prompts) ids = session->exact_prompt(std::move(ids));
  const int64_t limit = model_.max_model_len;
  int64_t longest = 0;
  for (const std::vector<int32_t>& ids : *prompts) {
    if (ids.empty()) return bad_request(str("the ", param, " is empty (encodes to no tokens)"), param);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
  }
  if (longest >= limit)
    return context_too_long(str("This model's maximum context length is ", limit, " tokens. However, your ", param, " has ",
                                longest, " tokens, leaving no room for a completion. Please shorten it."),
                            param);
  if (params.max_tokens && longest + *params.max_tokens > limit)
    return context_too_long(str("This model's maximum context length is ", limit, " tokens. However, you requested ",
                                longest + *params.max_tokens, " tokens (", longest, " in the ", param, ", ",
                                *params.max_tokens, " in the completion). Please reduce the length of the ", param,
                                " or max_tokens."),
                            "max_tokens");
  // Unset: completions stop after default_max_tokens, chats at max_model_len (0); both also stop
  // at max_model_len, so a default never fails a request.
  *max_tokens = params.max_tokens ? *params.max_tokens : params.kind == ApiKind::kChat ? 0 : options_.default_max_tokens;
  return std::nullopt;
}

}  // namespace rlrun::orchestrator::openai
