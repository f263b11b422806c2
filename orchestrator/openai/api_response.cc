// api_response.cc - OpenAI-shaped response bodies.
#include "orchestrator/openai/api_response.h"

namespace rlrun::orchestrator::openai {

namespace {

// A token as text for logprobs (special tokens written out, e.g. "<|im_end|>"). `lossy`: an
// invalid UTF-8 piece (part of a character) becomes U+FFFD; else its raw bytes.
std::string token_text(const engine::Tokenizer& tokenizer, int32_t id, bool lossy = true) {
  engine::DecodeOptions options;
  options.lossy_utf8 = lossy;
  Result<std::string> text = tokenizer.decode(std::vector<int32_t>{id}, options);
  return text.ok() ? *text : std::string();
}

// Completions' logprobs: {"tokens", "token_logprobs", "top_logprobs": null, "text_offset"}.
Json completion_logprobs(const ChoiceResult& c, const engine::Tokenizer& tokenizer, int64_t offset) {
  Json tokens = Json::array(), offsets = Json::array();
  for (int32_t id : c.token_ids) {
    std::string t = token_text(tokenizer, id);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(t.size());
    tokens.push_back(std::move(t));
  }
  return Json{{"tokens", std::move(tokens)}, {"token_logprobs", c.logprobs}, {"top_logprobs", nullptr},
              {"text_offset", std::move(offsets)}};
}

// Chat's logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": []}], "refusal": null}.
Json chat_logprobs(const ChoiceResult& c, const engine::Tokenizer& tokenizer) {
  Json content = Json::array();
  for (size_t i = 0; i < c.token_ids.size() && i < c.logprobs.size(); ++i) {
    std::vector<int> bytes;
    for (unsigned char b : token_text(tokenizer, c.token_ids[i], /*lossy=*/false)) bytes.push_back(b);
    content.push_back(Json{{"token", token_text(tokenizer, c.token_ids[i])},
                           {"logprob", c.logprobs[i]},
                           {"bytes", std::move(bytes)},
                           {"top_logprobs", Json::array()}});
  }
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

Json finish(const char* reason) { return reason ? Json(reason) : Json(nullptr); }

// The fields of a choice after its text: logprobs, finish_reason, the token id extensions.
void add_choice_tail(const ResponseHead& head, const ChoiceResult& c, const engine::Tokenizer& tokenizer,
                     int64_t text_offset, Json* choice) {
  Json& j = *choice;
  if (!head.logprobs) j["logprobs"] = nullptr;
  else if (head.kind == ApiKind::kChat) j["logprobs"] = chat_logprobs(c, tokenizer);
  else j["logprobs"] = completion_logprobs(c, tokenizer, text_offset);
  j["finish_reason"] = finish(c.finish_reason);
  if (!c.prompt_ids.empty()) j["prompt_token_ids"] = c.prompt_ids;
  j["token_ids"] = c.token_ids;
}

Json head_fields(const ResponseHead& head, const char* object) {
  return Json{{"id", head.id}, {"object", object}, {"created", head.created}, {"model", head.model}};
}

}  // namespace

Json completion_body(const ResponseHead& head, const std::vector<ChoiceResult>& choices, const Usage& usage,
                     const engine::Tokenizer& tokenizer) {
  const bool chat = head.kind == ApiKind::kChat;
  Json body = head_fields(head, chat ? "chat.completion" : "text_completion");
  Json list = Json::array();
  for (const ChoiceResult& c : choices) {
    Json j{{"index", c.index}};
    if (chat) j["message"] = Json{{"role", "assistant"}, {"content", c.text}};
    else j["text"] = c.text;
    add_choice_tail(head, c, tokenizer, 0, &j);
    list.push_back(std::move(j));
  }
  body["choices"] = std::move(list);
  body["usage"] = Json{{"prompt_tokens", usage.prompt_tokens},
                       {"completion_tokens", usage.completion_tokens},
                       {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return body;
}

Json chunk_body(const ResponseHead& head, const ChoiceResult& c, bool first, const engine::Tokenizer& tokenizer) {
  const bool chat = head.kind == ApiKind::kChat;
  Json body = head_fields(head, chat ? "chat.completion.chunk" : "text_completion");
  Json j{{"index", c.index}};
  if (chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!c.text.empty() || first) delta["content"] = c.text;
    j["delta"] = std::move(delta);
  } else {
    j["text"] = c.text;
  }
  add_choice_tail(head, c, tokenizer, 0, &j);
  body["choices"] = Json::array({std::move(j)});
  return body;
}

Json usage_chunk_body(const ResponseHead& head, const Usage& usage) {
  Json body = head_fields(head, head.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = Json::array();
  body["usage"] = Json{{"prompt_tokens", usage.prompt_tokens},
                       {"completion_tokens", usage.completion_tokens},
                       {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return body;
}

Json error_body(const ApiError& e) {
  const auto or_null = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  return Json{{"error", Json{{"message", e.message}, {"type", e.type}, {"param", or_null(e.param)}, {"code", or_null(e.code)}}}};
}

Json models_body(const std::string& model_id, int64_t created, int64_t max_model_len) {
  const Json model{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "rlrun"},
                   {"max_model_len", max_model_len}};
  return Json{{"object", "list"}, {"data", Json::array({model})}};
}

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace rlrun::orchestrator::openai
