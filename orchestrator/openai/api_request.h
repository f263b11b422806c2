// api_request.h - the body of POST /v1/completions and /v1/chat/completions (OpenAI's API),
// parsed and validated into typed parameters.
//
// Bodies are untrusted: anything but the documented shape is an ApiError (HTTP 400, OpenAI's
// error object) naming the field, never a crash. Unknown fields are refused, as OpenAI does, and
// so are known ones whose effect this server does not implement (e.g. presence_penalty != 0,
// top_logprobs > 0), so a client never gets silently different sampling.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace rlrun::orchestrator::openai {

// OpenAI's error object: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" is null
  std::string code;   // "" is null
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");

enum class ApiKind { kCompletion, kChat };

// One prompt of /v1/completions: text, or token ids (the extension RL clients use).
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct CompletionParams {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  std::vector<PromptInput> prompts;        // completions: one or more (a batch)
  nlohmann::ordered_json messages;         // chat: [{"role", "content": string, "name"?}], as given
  std::optional<int64_t> max_tokens;       // unset: completions 16, chat up to max_model_len
  float temperature = 1.0f;                // [0, 2]; 0 = greedy
  float top_p = 1.0f;                      // (0, 1]
  std::vector<std::string> stop;           // stop strings (non-empty)
  int64_t n = 1;                           // choices per prompt
  std::optional<uint64_t> seed;            // unset: a random one
  bool logprobs = false;                   // the sampled tokens' log-probs
  bool stream = false;
  bool include_usage = false;              // stream_options.include_usage
};

struct ParseLimits {
  int64_t max_choices = 128;      // prompts x n
  int64_t max_stop_strings = 16;
  size_t max_stop_bytes = 256;    // per stop string
  int max_json_depth = 32;        // nesting of the body
};

// Parses a request body. Returns an error (400) for invalid JSON or any invalid field.
std::optional<ApiError> parse_completion_request(ApiKind kind, std::string_view body, const ParseLimits& limits,
                                                 CompletionParams* out);

}  // namespace rlrun::orchestrator::openai
