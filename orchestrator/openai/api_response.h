// api_response.h - the JSON bodies the endpoint answers with, in OpenAI's shapes: completions,
// chat completions, their streamed chunks, the model list and the error object.
//
// Extension fields (what RL clients need, ignored by OpenAI clients): each choice carries
// `token_ids` (the generated tokens, the stop token included) and `prompt_token_ids` (the prompt
// as the model read it, chat template applied); in a stream, a choice's first chunk carries
// `prompt_token_ids` and every chunk the `token_ids` it adds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/openai/api_request.h"

namespace rlrun::orchestrator::openai {

using Json = nlohmann::ordered_json;

// One choice, or in a stream the part of it one chunk adds.
struct ChoiceResult {
  int64_t index = 0;
  std::string text;
  std::vector<int32_t> prompt_ids;      // omitted when empty (stream chunks after the first)
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;          // per token; with the request's `logprobs` only
  const char* finish_reason = nullptr;  // "stop", "length"; nullptr while streaming
};

struct Usage {
  int64_t prompt_tokens = 0;      // each prompt once, however many choices it has
  int64_t completion_tokens = 0;  // all choices
};

// What every body of one response shares.
struct ResponseHead {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool logprobs = false;
};

Json completion_body(const ResponseHead& head, const std::vector<ChoiceResult>& choices, const Usage& usage,
                     const engine::Tokenizer& tokenizer);
// One stream chunk. `first`: the choice's first chunk (a chat delta then carries the role).
Json chunk_body(const ResponseHead& head, const ChoiceResult& choice, bool first, const engine::Tokenizer& tokenizer);
// The last chunk of a stream with stream_options.include_usage: no choices, the usage.
Json usage_chunk_body(const ResponseHead& head, const Usage& usage);
Json error_body(const ApiError& error);
Json models_body(const std::string& model_id, int64_t created, int64_t max_model_len);

// Compact JSON text; invalid UTF-8 (a character cut by max_tokens) becomes U+FFFD.
std::string dump_json(const Json& j);

}  // namespace rlrun::orchestrator::openai
