// The run's OpenAI endpoint for environments (orchestrator/env/gateway.h), with the real
// SmolLM2-135M-Instruct tokenizer and chat template, a real HTTP client (libcurl) and this test as
// the engine (a test double standing in for the rollout workers: it takes each call and answers
// it with tokens it chooses). A two-turn chat in a session: the session's sampling replaces the
// request's, the second prompt keeps the model's own tokens where re-tokenising its text would
// give others, the recorded turns make one training sequence with the environment's tokens
// masked; then the error statuses of sessions that ended or never were.
#include "orchestrator/env/gateway.h"

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/io/model_io.h"
#include "orchestrator/data/prompt_format.h"
#include "tests/common/eventually.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun::orchestrator {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

struct Reply {
  long status = 0;
  json body;
};

size_t append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

Reply post(const std::string& url, const json& body) {
  CURL* curl = curl_easy_init();
  std::string text = body.dump(), reply;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, text.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  Reply r;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  r.body = json::parse(reply, nullptr, false);
  return r;
}

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string gguf = (testing::smollm2_dir().parent_path() / "smollm2-135m-instruct.Q4_1.gguf").string();
    if (!std::filesystem::exists(gguf)) {
      if (testing::skip_model_tests()) GTEST_SKIP() << gguf << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
      FAIL() << gguf << " is missing: run scripts/setup.sh --test, or set RLRUN_SKIP_MODEL_TESTS=1";
    }
    const std::string tokenizer_path = engine::checkpoint_tokenizer_path(gguf);
    Result<engine::Tokenizer> tokenizer = engine::load_tokenizer_file(tokenizer_path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    tokenizer_.emplace(*tokenizer);
    Result<PromptFormat> format = PromptFormat::create("auto", tokenizer_path, *tokenizer_);
    ASSERT_TRUE(format.ok() && format->is_chat());
    orchestrator::openai::ServedModel model("policy", *tokenizer_);
    eot_ = *format->end_of_turn();
    model.stop_ids = {eot_};
    model.render_chat = [f = *format](const nlohmann::ordered_json& m) { return f.chat_text(m); };
    model.max_model_len = 512;
    model.vocab_size = tokenizer_->vocab_size();
    GatewayOptions options;
    options.max_calls = 3;
    Result<std::unique_ptr<EpisodeGateway>> g = EpisodeGateway::start(options, std::move(model));
    ASSERT_TRUE(g.ok()) << g.status().message();
    gateway_ = std::move(*g);
  }

  // Plays the engine for one call: waits for it, checks it, answers with `tokens`.
  GenerateRequest answer_next_call(const Ids& tokens, uint64_t version) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<EpisodeGateway::Call> calls = gateway_->take_calls();
      if (calls.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      EXPECT_EQ(calls.size(), 1u);
      gateway_->sent(calls[0].request_id, 0);
      GenerateResult result;
      result.request_id = calls[0].request_id;
      result.token_ids = tokens;
      result.logprobs = std::vector<float>(tokens.size(), -0.5f);
      result.weight_versions = std::vector<int64_t>(tokens.size(), static_cast<int64_t>(version));
      result.first_weight_version = result.last_weight_version = version;
      result.finish_reason = FinishReason::kStop;
      EXPECT_TRUE(gateway_->on_result(result));
      return calls[0].request;
    }
    ADD_FAILURE() << "no call came";
    return {};
  }

  std::optional<engine::Tokenizer> tokenizer_;
  int32_t eot_ = -1;
  std::unique_ptr<EpisodeGateway> gateway_;
};

TEST_F(GatewayTest, ATwoTurnChatIsRecordedWithTheModelsOwnTokens) {
  SessionSampling sampling{0.5f, 0.9f, 16};
  const EpisodeGateway::Opened session = gateway_->open(/*version=*/3, sampling);
  // "Hello" as the model might write it, in two tokens that encoding the text would not give.
  const Ids hel = tokenizer_->encode("Hel"), lo = tokenizer_->encode("lo");
  ASSERT_EQ(hel.size(), 1u);
  ASSERT_EQ(lo.size(), 1u);
  ASSERT_EQ(tokenizer_->encode("Hello").size(), 1u);
  const Ids first_tokens = {hel[0], lo[0], eot_};

  json chat = {{"model", "policy"},
               {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
               {"temperature", 1.7},
               {"max_tokens", 200}};
  auto turn = std::async(std::launch::async, [&] { return post(session.base_url + "/chat/completions", chat); });
  const GenerateRequest first = answer_next_call(first_tokens, 3);
  const Reply r1 = turn.get();
  ASSERT_EQ(r1.status, 200) << r1.body.dump();
  EXPECT_EQ(r1.body["choices"][0]["message"]["content"], "Hello");
  // The session's sampling, not the request's; not served by weights older than its version.
  EXPECT_FLOAT_EQ(first.temperature, 0.5f);
  EXPECT_FLOAT_EQ(first.top_p, 0.9f);
  EXPECT_EQ(first.max_tokens, 16u);
  EXPECT_EQ(first.min_weight_version, 3u);

  chat["messages"].push_back({{"role", "assistant"}, {"content", "Hello"}});
  chat["messages"].push_back({{"role", "user"}, {"content", "The tool says 42."}});
  turn = std::async(std::launch::async, [&] { return post(session.base_url + "/chat/completions", chat); });
  const Ids second_tokens = {tokenizer_->encode("42")[0], eot_};
  const GenerateRequest second = answer_next_call(second_tokens, 4);
  const Reply r2 = turn.get();
  ASSERT_EQ(r2.status, 200) << r2.body.dump();

  // The second prompt begins with the first prompt and the model's tokens as sampled.
  Ids recorded(first.prompt_ids.begin(), first.prompt_ids.end());
  recorded.insert(recorded.end(), first_tokens.begin(), first_tokens.end());
  const Ids prompt2(second.prompt_ids.begin(), second.prompt_ids.end());
  ASSERT_GT(prompt2.size(), recorded.size());
  EXPECT_TRUE(std::equal(recorded.begin(), recorded.end(), prompt2.begin()));
  EXPECT_EQ(Ids(r2.body["choices"][0]["prompt_token_ids"].begin(), r2.body["choices"][0]["prompt_token_ids"].end()), prompt2);
  // ... whereas the text encoded again has "Hello" as one token: the ids differ, the text not.
  Result<std::string> text2 = tokenizer_->decode(prompt2);
  ASSERT_TRUE(text2.ok());
  EXPECT_NE(tokenizer_->encode(*text2), prompt2);

  EpisodeGateway::Closed closed = gateway_->close(session.id);
  EXPECT_EQ(closed.calls, 2);
  EXPECT_EQ(closed.spliced, 1);
  EXPECT_EQ(closed.retokenized_differ, 1);
  ASSERT_EQ(closed.turns.size(), 2u);
  const std::vector<EpisodeSegment> segments = episode_segments(closed.turns);
  ASSERT_EQ(segments.size(), 1u);  // one sequence: the environment's turn masked inside it
  const EpisodeSegment& s = segments[0];
  EXPECT_EQ(s.prompt, Ids(first.prompt_ids.begin(), first.prompt_ids.end()));
  const size_t env = prompt2.size() - recorded.size();
  ASSERT_EQ(s.completion.size(), first_tokens.size() + env + second_tokens.size());
  for (size_t i = 0; i < s.mask.size(); ++i) {
    const bool policy = i < first_tokens.size() || i >= first_tokens.size() + env;
    EXPECT_EQ(s.mask[i], policy ? 1 : 0) << i;
  }
  Result<std::string> env_text = tokenizer_->decode(Ids(s.completion.begin() + 3, s.completion.begin() + 3 + env));
  ASSERT_TRUE(env_text.ok());
  EXPECT_NE(env_text->find("The tool says 42."), std::string::npos) << *env_text;

  // The episode is over: its calls are refused, as are unknown sessions and extra choices.
  const Reply late = post(session.base_url + "/chat/completions", chat);
  EXPECT_EQ(late.status, 409);
  EXPECT_EQ(late.body["error"]["code"], "session_expired");
  const std::string base = "http://" + gateway_->address();
  const Reply unknown = post(base + "/sessions/0123/v1/chat/completions", chat);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["error"]["code"], "session_not_found");
  const EpisodeGateway::Opened other = gateway_->open(0, sampling);
  chat["n"] = 2;
  const Reply two = post(other.base_url + "/chat/completions", chat);
  EXPECT_EQ(two.status, 400);
  EXPECT_EQ(two.body["error"]["param"], "n");
}

TEST_F(GatewayTest, CallsPastTheLimitAndAfterShutdownAreRefusedNotLeftWaiting) {
  const EpisodeGateway::Opened session = gateway_->open(0, SessionSampling{1.0f, 1.0f, 4});
  const json call = {{"model", "policy"}, {"prompt", "Hi"}, {"max_tokens", 4}};
  for (int i = 0; i < 3; ++i) {  // max_calls = 3
    auto reply = std::async(std::launch::async, [&] { return post(session.base_url + "/completions", call); });
    answer_next_call({eot_}, 0);
    EXPECT_EQ(reply.get().status, 200);
  }
  const Reply over = post(session.base_url + "/completions", call);
  EXPECT_EQ(over.status, 429);
  EXPECT_EQ(over.body["error"]["code"], "max_calls");
  // A call no worker will answer ends when the run does: cancelled, never a hang.
  const EpisodeGateway::Opened next = gateway_->open(0, SessionSampling{1.0f, 1.0f, 4});
  auto waiting = std::async(std::launch::async, [&] { return post(next.base_url + "/completions", call); });
  ASSERT_TRUE(testing::eventually([&] { return !gateway_->take_calls().empty(); }, std::chrono::seconds(20)))
      << "the call never reached the gateway";
  gateway_->shut_down();
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(waiting.get().status, 200);
}

}  // namespace
}  // namespace rlrun::orchestrator
