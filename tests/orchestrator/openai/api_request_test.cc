// Request bodies of the OpenAI endpoint: every documented field parsed, and every malformed or
// unsupported one refused with a 400 naming it (never a crash, never silently ignored).
#include "orchestrator/openai/api_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace rlrun::orchestrator::openai {
namespace {

using ::testing::HasSubstr;

std::optional<ApiError> parse(ApiKind kind, const std::string& body, CompletionParams* p) {
  return parse_completion_request(kind, body, ParseLimits{}, p);
}

// The error for `body`, which must be refused.
ApiError refused(ApiKind kind, const std::string& body) {
  CompletionParams p;
  std::optional<ApiError> e = parse(kind, body, &p);
  EXPECT_TRUE(e.has_value()) << body << " was accepted";
  return e.value_or(ApiError{});
}

TEST(ApiRequest, CompletionFieldsAreParsed) {
  CompletionParams p;
  ASSERT_FALSE(parse(ApiKind::kCompletion,
                     R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
                         "stop": ["\n", "END"], "n": 3, "seed": -1, "logprobs": 0, "stream": true,
                         "stream_options": {"include_usage": true}, "user": "u", "presence_penalty": 0})",
                     &p));
  EXPECT_EQ(p.model, "m");
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.prompts[0].text, "hi");
  EXPECT_FALSE(p.prompts[0].is_ids);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.seed, ~uint64_t{0});
  EXPECT_TRUE(p.logprobs);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
}

TEST(ApiRequest, PromptsMayBeTextTokenIdsOrBatches) {
  CompletionParams p;
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model": "m", "prompt": [1, 2, 3]})", &p));
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_TRUE(p.prompts[0].is_ids);
  EXPECT_EQ(p.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(parse(ApiKind::kCompletion, R"({"model": "m", "prompt": ["a", [4, 5]], "stop": "x"})", &p));
  ASSERT_EQ(p.prompts.size(), 2u);
  EXPECT_EQ(p.prompts[0].text, "a");
  EXPECT_EQ(p.prompts[1].ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_FALSE(p.max_tokens.has_value());
}

TEST(ApiRequest, ChatMessagesAreCheckedAndPartsFlattened) {
  CompletionParams p;
  ASSERT_FALSE(parse(ApiKind::kChat,
                     R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                         "logprobs": true, "top_logprobs": 0, "max_completion_tokens": 5})",
                     &p));
  ASSERT_EQ(p.messages.size(), 2u);
  EXPECT_EQ(p.messages[1]["content"], "a\nb");
  EXPECT_EQ(p.messages[0]["role"], "system");
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_THAT(refused(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "wizard", "content": "x"}]})").message,
              HasSubstr("role"));
  EXPECT_THAT(refused(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").message,
              HasSubstr("other parts are not supported"));
  EXPECT_EQ(refused(ApiKind::kChat, R"({"model": "m", "messages": []})").param, "messages");
  EXPECT_EQ(refused(ApiKind::kChat, R"({"model": "m", "prompt": "x", "messages": [{"role": "user"}]})").param, "prompt");
}

TEST(ApiRequest, MalformedBodiesAreRefusedWith400) {
  for (const std::string body : {"", "{", "[]", "null", "{\"model\": \"m\", \"prompt\": \"x\"", "\xff\xfe"}) {
    const ApiError e = refused(ApiKind::kCompletion, body);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(refused(ApiKind::kCompletion, "{\"model\": \"m\", \"prompt\": " + deep + "}").message, HasSubstr("nests"));
}

TEST(ApiRequest, EachBadFieldIsNamed) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"prompt": "x"})", "model"},
      {R"({"model": 3, "prompt": "x"})", "model"},
      {R"({"model": "m"})", "prompt"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 1e30})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 99999999999999999999})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "temperature": -1})", "temperature"},
      {R"({"model": "m", "prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"model": "m", "prompt": "x", "top_p": 0})", "top_p"},
      {R"({"model": "m", "prompt": "x", "n": 0})", "n"},
      {R"({"model": "m", "prompt": "x", "n": 1000})", "n"},
      {R"({"model": "m", "prompt": ["a", "b"], "n": 100})", "n"},
      {R"({"model": "m", "prompt": "x", "stop": [""]})", "stop"},
      {R"({"model": "m", "prompt": "x", "stop": 5})", "stop"},
      {R"({"model": "m", "prompt": [1, -2]})", "prompt"},
      {R"({"model": "m", "prompt": [1, "a"]})", "prompt"},
      {R"({"model": "m", "prompt": []})", "prompt"},
      {R"({"model": "m", "prompt": "x", "logprobs": 5})", "logprobs"},
      {R"({"model": "m", "prompt": "x", "echo": true})", "echo"},
      {R"({"model": "m", "prompt": "x", "frequency_penalty": 0.5})", "frequency_penalty"},
      {R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"model": "m", "prompt": "x", "tools": []})", "tools"},
      {R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError e = refused(ApiKind::kCompletion, body);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, param) << body << ": " << e.message;
  }
  EXPECT_EQ(refused(ApiKind::kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})").code,
            "unsupported_parameter");
}

}  // namespace
}  // namespace rlrun::orchestrator::openai
