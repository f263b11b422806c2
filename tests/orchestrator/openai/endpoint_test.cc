// The OpenAI endpoint end to end inside one process: a real HTTP server (civetweb on loopback)
// over an EngineLoop driving a Scheduler on a tiny random model with the tiny tokenizer. Results
// are checked against rollout::generate on an identical model; errors against OpenAI's shapes.
#include "orchestrator/openai/endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "common/observe/log.h"
#include "orchestrator/openai/http_server.h"
#include "rollout/engine_loop.h"
#include "rollout/generate.h"
#include "tests/common/http_get.h"
#include "tests/engine/model/model_test_util.h"

namespace rlrun::orchestrator::openai {
namespace {

using rollout::EngineLoop;
using rollout::EngineLoopOptions;
using rollout::GenerateOptions;
using rollout::Generation;
using rollout::Scheduler;
using rollout::SchedulerOptions;
using rollout::generate;

using ::testing::HasSubstr;
using nlohmann::json;
using rlrun::testing::http_request;
using rlrun::testing::http_get;
using rlrun::testing::http_post;

constexpr int64_t kMaxModelLen = 64;

std::unique_ptr<engine::Model> tiny_model(engine::Backend& backend) {
  engine::ModelConfig c = engine::testing::tiny_config(false);
  c.vocab_size = 400;  // the tiny tokenizer's 397 tokens fit
  auto m = engine::Model::create(backend, c);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  (*m)->weights().init_random(11, 0.3f);
  return std::move(m).value();
}

engine::Tokenizer tiny_tokenizer() {
  auto t = engine::Tokenizer::load(std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

// A stand-in chat template; "FAIL" in a message makes it fail, as a template's raise_exception.
Result<std::string> render_chat(const nlohmann::ordered_json& messages) {
  std::string text;
  for (const auto& m : messages) {
    if (m["content"].get<std::string>().find("FAIL") != std::string::npos) return invalid_argument("raised: FAIL");
    text += str("<", m["role"].get<std::string>(), "> ", m["content"].get<std::string>(), "\n");
  }
  return text + "<assistant> ";
}

class Endpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = engine::testing::cpu_backend().release();
    model_ = tiny_model(*backend_).release();
    SchedulerOptions o;
    o.max_num_seqs = 16;
    o.max_model_len = kMaxModelLen;
    o.kv_block_size = 4;
    o.kv_num_blocks = 16 * kMaxModelLen / 4;
    scheduler_ = Scheduler::create(*model_, o).value().release();
    loop_ = new EngineLoop(*scheduler_, EngineLoopOptions{});
    ServedModel served("tiny", tiny_tokenizer());
    served.render_chat = render_chat;
    served.stop_ids = {2};
    served.max_model_len = kMaxModelLen;
    served.vocab_size = 400;
    EndpointOptions options;
    options.max_body_bytes = 64 << 10;
    endpoint_ = new OpenAiEndpoint(std::move(served), *loop_, options);
    HttpServerOptions http;
    http.bind = "127.0.0.1:0";
    http.threads = 16;
    auto server = HttpServer::start(http, *endpoint_);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete endpoint_;
    delete loop_;
    delete scheduler_;
    delete model_;
    delete backend_;
  }

  static json post(const std::string& path, const json& body, int expect_status = 200) {
    const auto r = http_post(server_->port(), path, body.dump());
    EXPECT_EQ(r.status, expect_status) << body.dump() << " -> " << r.body;
    json j = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.body;
    return j;
  }
  // The SSE events of a streamed request, without the final [DONE] (checked here).
  static std::vector<json> post_stream(const std::string& path, json body) {
    body["stream"] = true;
    const auto r = http_post(server_->port(), path, body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<json> events;
    size_t at = 0;
    bool done = false;
    while (at < r.body.size()) {
      const size_t end = r.body.find("\n\n", at);
      EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << r.body.substr(at);
      if (end == std::string::npos) break;
      const std::string event = r.body.substr(at, end - at);
      at = end + 2;
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      EXPECT_FALSE(done) << "an event after [DONE]";
      if (event == "data: [DONE]") done = true;
      else events.push_back(json::parse(event.substr(6)));
    }
    EXPECT_TRUE(done) << "the stream did not end with data: [DONE]";
    return events;
  }
  // What rollout::generate gives on an identical model.
  static Generation reference(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    auto backend = engine::testing::cpu_backend();
    auto model = tiny_model(*backend);
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0;
    o.stop_ids = {2};
    return generate(*model, prompt, o).value();
  }

  static engine::Backend* backend_;
  static engine::Model* model_;
  static Scheduler* scheduler_;
  static EngineLoop* loop_;
  static OpenAiEndpoint* endpoint_;
  static HttpServer* server_;
};
engine::Backend* Endpoint::backend_ = nullptr;
engine::Model* Endpoint::model_ = nullptr;
Scheduler* Endpoint::scheduler_ = nullptr;
EngineLoop* Endpoint::loop_ = nullptr;
OpenAiEndpoint* Endpoint::endpoint_ = nullptr;
HttpServer* Endpoint::server_ = nullptr;

const std::vector<int32_t> kPrompt = {1, 300, 301, 5};

TEST_F(Endpoint, ListsTheModel) {
  const auto r = http_get(server_->port(), "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["max_model_len"], kMaxModelLen);
  EXPECT_EQ(http_get(server_->port(), "/v1/models/tiny").status, 200);
  EXPECT_EQ(http_get(server_->port(), "/v1/models/other").status, 404);
  EXPECT_EQ(http_get(server_->port(), "/health").status, 200);
}

TEST_F(Endpoint, GreedyCompletionIsGeneratesWithTokenIdsAndLogprobs) {
  const json j = post("/v1/completions", {{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 9}, {"temperature", 0},
                                          {"logprobs", 0}});
  const Generation ref = reference(kPrompt, 9);
  EXPECT_EQ(j["object"], "text_completion");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["token_ids"].get<std::vector<int32_t>>(), ref.ids);
  EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), kPrompt);
  engine::testing::expect_near_all(c["logprobs"]["token_logprobs"].get<std::vector<float>>(), ref.logprobs, 1e-4f,
                                   "logprobs vs generate");
  EXPECT_EQ(c["logprobs"]["tokens"].size(), ref.ids.size());
  engine::DecodeOptions skip;
  skip.skip_special_tokens = true;
  EXPECT_EQ(c["text"], tiny_tokenizer().decode(ref.ids, skip).value());
  EXPECT_EQ(c["finish_reason"], ref.finish_reason == rollout::FinishReason::kStop ? "stop" : "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], ref.ids.size());
}

TEST_F(Endpoint, AStreamCarriesTheSameTokensAsTheWholeAnswer) {
  const json body{{"model", "tiny"}, {"prompt", "What is the sum"}, {"max_tokens", 12}, {"temperature", 0}};
  const json whole = post("/v1/completions", body)["choices"][0];
  const std::vector<json> events = post_stream("/v1/completions", body);
  ASSERT_GE(events.size(), 2u);
  std::string text;
  std::vector<int32_t> ids;
  for (const json& e : events) {
    ASSERT_EQ(e["choices"].size(), 1u);
    text += e["choices"][0]["text"].get<std::string>();
    for (int32_t id : e["choices"][0]["token_ids"]) ids.push_back(id);
  }
  EXPECT_EQ(events.front()["choices"][0]["prompt_token_ids"], whole["prompt_token_ids"]);
  EXPECT_FALSE(events.back()["choices"][0].contains("prompt_token_ids"));
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], whole["finish_reason"]);
  EXPECT_TRUE(events.front()["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(text, whole["text"]);
  EXPECT_EQ(ids, whole["token_ids"].get<std::vector<int32_t>>());
}

TEST_F(Endpoint, SeededChoicesAreReproducibleAndDistinct) {
  const json body{{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 10}, {"n", 4}, {"seed", 5}};
  const json a = post("/v1/completions", body), b = post("/v1/completions", body);
  ASSERT_EQ(a["choices"].size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["token_ids"], b["choices"][i]["token_ids"]);
    distinct.insert(a["choices"][i]["token_ids"].get<std::vector<int32_t>>());
  }
  EXPECT_GT(distinct.size(), 1u);
}

TEST_F(Endpoint, ConcurrentRequestsShareBatches) {
  const int64_t batched_before = loop_->stats().scheduler.max_running;
  std::vector<std::thread> clients;
  std::vector<json> answers(8);
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      answers[i] = post("/v1/completions", {{"model", "tiny"}, {"prompt", {1, 300 + i}}, {"max_tokens", 40},
                                            {"temperature", 0}});
    });
  }
  for (std::thread& t : clients) t.join();
  for (const json& a : answers) EXPECT_EQ(a["choices"].size(), 1u);
  EXPECT_EQ(answers[3]["choices"][0]["token_ids"].get<std::vector<int32_t>>(), reference({1, 303}, 40).ids);
  EXPECT_GE(std::max(batched_before, loop_->stats().scheduler.max_running), 2) << "requests were not batched together";
  EXPECT_EQ(loop_->stats().unfinished, 0);
}

TEST_F(Endpoint, StopStringsCutTheText) {
  const json body{{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 30}, {"temperature", 0}};
  const json full = post("/v1/completions", body)["choices"][0];
  const std::string text = full["text"];
  ASSERT_GE(text.size(), 8u) << "the tiny model's greedy text is too short for this test: " << text;
  // Two ASCII characters from the middle on: the random model's text also holds U+FFFD where its
  // bytes are no UTF-8, and a stop string matches the bytes the model wrote, not their replacement.
  const auto ascii = [&](size_t i) { return static_cast<unsigned char>(text[i]) < 0x80; };
  size_t at = text.size() / 2;
  while (at + 1 < text.size() && !(ascii(at) && ascii(at + 1))) ++at;
  const std::string stop = at + 1 < text.size() ? text.substr(at, 2) : "";
  ASSERT_FALSE(stop.empty()) << text;
  json with_stop = body;
  with_stop["stop"] = {stop, "never appears 123"};
  for (const bool stream : {false, true}) {
    std::string got;
    std::vector<int32_t> ids;
    json finish;
    if (stream) {
      for (const json& e : post_stream("/v1/completions", with_stop)) {
        got += e["choices"][0]["text"].get<std::string>();
        for (int32_t id : e["choices"][0]["token_ids"]) ids.push_back(id);
        finish = e["choices"][0]["finish_reason"];
      }
    } else {
      const json c = post("/v1/completions", with_stop)["choices"][0];
      got = c["text"];
      ids = c["token_ids"].get<std::vector<int32_t>>();
      finish = c["finish_reason"];
    }
    EXPECT_EQ(got, text.substr(0, text.find(stop))) << "stream " << stream;
    EXPECT_EQ(finish, "stop");
    const auto all = full["token_ids"].get<std::vector<int32_t>>();
    ASSERT_LE(ids.size(), all.size());
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), all.begin())) << "the kept tokens are a prefix of the full answer";
  }
}

TEST_F(Endpoint, ChatRendersTheMessagesAndStreamsDeltas) {
  const json body{{"model", "tiny"},
                  {"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}},
                  {"max_tokens", 6}, {"temperature", 0}, {"logprobs", true}};
  const json j = post("/v1/chat/completions", body);
  EXPECT_EQ(j["object"], "chat.completion");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(),
            tiny_tokenizer().encode("<system> be brief\n<user> hi\n<assistant> "));
  EXPECT_EQ(c["logprobs"]["content"].size(), c["token_ids"].size());
  const std::vector<json> events = post_stream("/v1/chat/completions", body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  std::vector<int32_t> ids;
  for (const json& e : events) {
    content += e["choices"][0]["delta"].value("content", "");
    if (e["choices"][0].contains("token_ids"))
      for (const json& id : e["choices"][0]["token_ids"]) ids.push_back(id.get<int32_t>());
  }
  EXPECT_EQ(content, c["message"]["content"]) << "stream ids " << json(ids).dump() << " vs " << c["token_ids"].dump();
}

TEST_F(Endpoint, StreamUsageComesLastWhenAskedFor) {
  const std::vector<json> events = post_stream(
      "/v1/completions", {{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 5}, {"temperature", 0}, {"n", 2},
                          {"stream_options", {{"include_usage", true}}}});
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["prompt_tokens"], 4);
  EXPECT_GE(events.back()["usage"]["completion_tokens"], 2);
}

// Each bad request gets its status and OpenAI's error object; the server serves on.
TEST_F(Endpoint, BadRequestsGetErrorObjects) {
  struct Case {
    std::string method, path, body;
    int status;
    std::string code_or_param;
  };
  const std::string ok_prompt = R"("prompt": [1, 2])";
  const Case cases[] = {
      {"POST", "/v1/completions", R"({"model": "gpt-4", )" + ok_prompt + "}", 404, "model_not_found"},
      {"POST", "/v1/completions", R"({"model": "tiny", )", 400, ""},
      {"POST", "/v1/completions", R"({"model": "tiny", "max_tokens": 1000000, )" + ok_prompt + "}", 400, "context_length_exceeded"},
      {"POST", "/v1/completions", R"({"model": "tiny", "prompt": [1, 500]})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"model": "tiny", "prompt": ""})", 400, "prompt"},
      {"POST", "/v1/chat/completions", R"({"model": "tiny", "messages": [{"role": "user", "content": "FAIL"}]})", 400, "messages"},
      {"GET", "/v1/completions", "", 405, "method_not_allowed"},
      {"POST", "/v1/models", "{}", 405, "method_not_allowed"},
      {"GET", "/v2/anything", "", 404, "not_found"},
      {"POST", "/v1/completions", R"({"model": "tiny", "prompt": ")" + std::string(100 << 10, 'a') + "\"}", 413, "request_too_large"},
  };
  for (const Case& c : cases) {
    const auto r = http_request(server_->port(), c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << " " << c.body.substr(0, 200) << " -> " << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    EXPECT_TRUE(e["type"].is_string());
    EXPECT_TRUE(e.contains("param") && e.contains("code"));
    if (!c.code_or_param.empty()) {
      EXPECT_TRUE(e["code"] == c.code_or_param || e["param"] == c.code_or_param) << r.body;
    }
  }
  // A prompt longer than max_model_len: the message says so.
  std::vector<int32_t> long_prompt(kMaxModelLen + 6, 7);
  const json e = post("/v1/completions", {{"model", "tiny"}, {"prompt", long_prompt}}, 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr("maximum context length is 64"));
  EXPECT_EQ(http_get(server_->port(), "/health").status, 200);
}

}  // namespace
}  // namespace rlrun::orchestrator::openai
