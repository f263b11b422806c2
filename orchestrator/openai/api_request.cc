// api_request.cc - strict parsing of completion and chat completion request bodies.
#include "orchestrator/openai/api_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/json_nesting.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator::openai {

namespace {

using Json = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;

MaybeError get_integer(const Json& v, const std::string& name, int64_t lo, int64_t hi, int64_t* out) {
  const auto range = [&] { return bad_request(str("`", name, "` must be an integer from ", lo, " to ", hi), name); };
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(hi)) return range();
    *out = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else {
    return range();
  }
  if (*out < lo || *out > hi) return range();
  return std::nullopt;
}

MaybeError get_number(const Json& v, const std::string& name, double lo, double hi, bool lo_open, float* out) {
  const double x = v.is_number() ? v.get<double>() : std::nan("");
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    return bad_request(str("`", name, "` must be a number in ", lo_open ? "(" : "[", lo, ", ", hi, "]"), name);
  *out = static_cast<float>(x);
  return std::nullopt;
}

MaybeError get_bool(const Json& v, const std::string& name, bool* out) {
  if (!v.is_boolean()) return bad_request(str("`", name, "` must be true or false"), name);
  *out = v.get<bool>();
  return std::nullopt;
}

MaybeError get_stop(const Json& v, const ParseLimits& limits, std::vector<std::string>* out) {
  const Json list = v.is_string() ? Json::array({v}) : v;
  if (!list.is_array() || static_cast<int64_t>(list.size()) > limits.max_stop_strings)
    return bad_request(str("`stop` must be a string or a list of at most ", limits.max_stop_strings, " strings"), "stop");
  for (const Json& s : list) {
    if (!s.is_string() || s.get_ref<const std::string&>().empty() ||
        s.get_ref<const std::string&>().size() > limits.max_stop_bytes)
      return bad_request(str("each `stop` string must be non-empty and at most ", limits.max_stop_bytes, " bytes"), "stop");
    out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// A field whose only supported value is its neutral one (OpenAI accepts it; we cannot honour more).
MaybeError only_neutral(const Json& v, const std::string& name) {
  const bool neutral = v.is_null() || (v.is_number() && v.get<double>() == 0) || (v.is_boolean() && !v.get<bool>()) ||
                       (v.is_object() && v.empty()) || (name == "best_of" && v.is_number_integer() && v.get<int64_t>() == 1);
  if (neutral) return std::nullopt;
  return bad_request(str("`", name, "` is not supported by this server; leave it out"), name, "unsupported_parameter");
}

MaybeError get_prompts(const Json& v, std::vector<PromptInput>* out) {
  const auto bad = [] {
    return bad_request("`prompt` must be a string, a list of strings, a list of token ids, or a list of lists of token ids",
                       "prompt");
  };
  const auto ids_of = [&](const Json& list, PromptInput* p) -> MaybeError {
    for (const Json& id : list) {
      int64_t x = 0;
      if (get_integer(id, "prompt", 0, std::numeric_limits<int32_t>::max(), &x)) return bad();
      p->ids.push_back(static_cast<int32_t>(x));
    }
    p->is_ids = true;
    return std::nullopt;
  };
  if (v.is_string()) {
    out->push_back({v.get<std::string>(), {}, false});
    return std::nullopt;
  }
  if (!v.is_array() || v.empty()) return bad();
  if (v.front().is_number()) {  // one prompt of token ids
    PromptInput p;
    if (MaybeError e = ids_of(v, &p)) return e;
    out->push_back(std::move(p));
    return std::nullopt;
  }
  for (const Json& item : v) {
    PromptInput p;
    if (item.is_string()) p.text = item.get<std::string>();
    else if (!item.is_array() || item.empty()) return bad();
    else if (MaybeError e = ids_of(item, &p)) return e;
    out->push_back(std::move(p));
  }
  return std::nullopt;
}

// Chat messages, with list-of-parts content flattened to one string (text parts joined by "\n").
MaybeError get_messages(const Json& v, Json* out) {
  if (!v.is_array() || v.empty()) return bad_request("`messages` must be a non-empty list", "messages");
  *out = Json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = str("messages[", i, "]");
    const Json& m = v[i];
    if (!m.is_object()) return bad_request(str("`", at, "` must be an object with `role` and `content`"), "messages");
    Json msg = Json::object();
    for (const auto& [key, value] : m.items()) {
      if (key == "role") {
        static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
        if (!value.is_string() || std::none_of(std::begin(kRoles), std::end(kRoles), [&](const char* r) { return value == r; }))
          return bad_request(str("`", at, ".role` must be one of system, developer, user, assistant, tool"), "messages");
        msg["role"] = value;
      } else if (key == "content") {
        if (value.is_string() || value.is_null()) {
          msg["content"] = value.is_null() ? Json("") : value;
          continue;
        }
        if (!value.is_array()) return bad_request(str("`", at, ".content` must be a string or a list of text parts"), "messages");
        std::string text;
        for (const Json& part : value) {
          if (!part.is_object() || part.value("type", Json()) != "text" || !part.contains("text") || !part["text"].is_string())
            return bad_request(str("`", at, ".content` parts must be {\"type\": \"text\", \"text\": ...}; other parts are not supported"),
                               "messages");
          if (!text.empty()) text.push_back('\n');
          text += part["text"].get<std::string>();
        }
        msg["content"] = text;
      } else if (key == "name") {
        if (!value.is_string()) return bad_request(str("`", at, ".name` must be a string"), "messages");
        msg["name"] = value;
      } else {
        return bad_request(str("`", at, ".", key, "` is not supported (role, content and name are)"), "messages");
      }
    }
    if (!msg.contains("role")) return bad_request(str("`", at, "` has no `role`"), "messages");
    if (!msg.contains("content")) msg["content"] = "";
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

// Fields both endpoints take. *known is false for a field that is not one of them.
MaybeError parse_common(const std::string& key, const Json& v, const ParseLimits& limits, CompletionParams* p,
                        bool* known) {
  *known = true;
  int64_t x = 0;
  if (key == "model") {
    if (!v.is_string()) return bad_request("`model` must be a string", "model");
    p->model = v.get<std::string>();
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    if (v.is_null()) return std::nullopt;
    if (MaybeError e = get_integer(v, key, 1, std::numeric_limits<int32_t>::max(), &x)) return e;
    p->max_tokens = x;
  } else if (key == "temperature") {
    if (!v.is_null()) return get_number(v, key, 0, 2, false, &p->temperature);
  } else if (key == "top_p") {
    if (!v.is_null()) return get_number(v, key, 0, 1, true, &p->top_p);
  } else if (key == "n") {
    if (MaybeError e = get_integer(v, key, 1, limits.max_choices, &x)) return e;
    p->n = x;
  } else if (key == "stop") {
    if (!v.is_null()) return get_stop(v, limits, &p->stop);
  } else if (key == "seed") {
    if (v.is_null()) return std::nullopt;
    if (MaybeError e = get_integer(v, key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &x)) return e;
    p->seed = static_cast<uint64_t>(x);
  } else if (key == "stream") {
    if (!v.is_null()) return get_bool(v, key, &p->stream);
  } else if (key == "stream_options") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object() || v.size() != 1 || !v.contains("include_usage"))
      return bad_request("`stream_options` must be {\"include_usage\": true|false}", key);
    return get_bool(v["include_usage"], "stream_options.include_usage", &p->include_usage);
  } else if (key == "user") {
    if (!v.is_string() && !v.is_null()) return bad_request("`user` must be a string", key);
  } else if (key == "presence_penalty" || key == "frequency_penalty" || key == "logit_bias") {
    return only_neutral(v, key);
  } else {
    *known = false;
  }
  return std::nullopt;
}

MaybeError parse_field(ApiKind kind, const std::string& key, const Json& v, const ParseLimits& limits,
                       CompletionParams* p) {
  bool known = false;
  if (MaybeError e = parse_common(key, v, limits, p, &known)) return e;
  if (known) return std::nullopt;
  if (kind == ApiKind::kCompletion) {
    if (key == "prompt") return get_prompts(v, &p->prompts);
    if (key == "logprobs") {  // completions: an integer count of top alternatives
      if (v.is_null()) return std::nullopt;
      int64_t x = 0;
      if (get_integer(v, key, 0, 20, &x))
        return bad_request("`logprobs` must be null or an integer from 0 to 20", key);
      if (x > 0) return bad_request("`logprobs` > 0 (top alternatives) is not supported; 0 gives the sampled tokens' log-probs",
                                    key, "unsupported_parameter");
      p->logprobs = true;
      return std::nullopt;
    }
    if (key == "echo" || key == "suffix" || key == "best_of") return only_neutral(v, key);
  } else {
    if (key == "messages") return get_messages(v, &p->messages);
    if (key == "logprobs") return v.is_null() ? std::nullopt : get_bool(v, key, &p->logprobs);
    if (key == "top_logprobs") {
      if (v.is_null() || (v.is_number_integer() && v.get<int64_t>() == 0)) return std::nullopt;
      return bad_request("`top_logprobs` > 0 is not supported; `logprobs: true` gives the sampled tokens' log-probs", key,
                         "unsupported_parameter");
    }
  }
  return bad_request(str("Unrecognized request argument supplied: ", key), key);
}

}  // namespace

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

std::optional<ApiError> parse_completion_request(ApiKind kind, std::string_view body, const ParseLimits& limits,
                                                 CompletionParams* out) {
  if (!json_nesting_within(body, limits.max_json_depth))
    return bad_request(str("the JSON body nests deeper than ", limits.max_json_depth, " levels"));
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_request("We could not parse the JSON body of your request: it is not valid JSON");
  if (!j.is_object()) return bad_request("the JSON body must be an object");
  CompletionParams p;
  p.kind = kind;
  for (const auto& [key, value] : j.items()) {
    if (MaybeError e = parse_field(kind, key, value, limits, &p)) return e;
  }
  if (!j.contains("model")) return bad_request("you must provide a model parameter", "model");
  if (kind == ApiKind::kCompletion && p.prompts.empty()) return bad_request("you must provide a `prompt`", "prompt");
  if (kind == ApiKind::kChat && p.messages.empty()) return bad_request("you must provide `messages`", "messages");
  if (p.include_usage && !p.stream) return bad_request("`stream_options` is only allowed with `stream: true`", "stream_options");
  const int64_t prompts = std::max<int64_t>(1, static_cast<int64_t>(p.prompts.size()));
  if (prompts * p.n > limits.max_choices)
    return bad_request(str(prompts, " prompts x n ", p.n, " is more than the ", limits.max_choices, " choices a request may have"),
                       "n");
  *out = std::move(p);
  return std::nullopt;
}

}  // namespace rlrun::orchestrator::openai
