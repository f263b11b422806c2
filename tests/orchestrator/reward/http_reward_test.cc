// HttpRewardClient against real servers on loopback: examples/reward_server.py, and the test double
// tests/reference/faulty_reward_server.py for each way a server fails. Short timeouts and
// back-offs keep the whole file to a few seconds.
#include "orchestrator/reward/http_reward.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "orchestrator/launch/spawn.h"
#include "orchestrator/reward/verifiers.h"
#include "tests/common/http_get.h"
#include "tests/common/test_seed.h"
#include "tests/orchestrator/reward/reward_server_process.h"

namespace rlrun::orchestrator {
namespace {

using ::testing::HasSubstr;
using testing::RewardServerProcess;

constexpr const char* kExampleServer = "examples/reward_server.py";
constexpr const char* kFaultyServer = "tests/reference/faulty_reward_server.py";

HttpRewardOptions fast_options(const std::string& url) {
  HttpRewardOptions o;
  o.url = url;
  o.timeout_seconds = 2;
  o.max_failures = 5;
  o.batch_size = 8;
  o.max_in_flight = 2;
  o.first_backoff_seconds = 0.01;
  o.max_backoff_seconds = 0.05;
  return o;
}

std::unique_ptr<HttpRewardClient> make_client(const HttpRewardOptions& o) {
  Result<std::unique_ptr<HttpRewardClient>> c = HttpRewardClient::create(o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Items 0..n-1 whose label is their key: the faulty double's reward is float(label).
void submit_numbered(HttpRewardClient& client, int n) {
  for (int i = 0; i < n; ++i) {
    const std::string k = std::to_string(i);
    ASSERT_TRUE(client.submit({static_cast<uint64_t>(i), "Q" + k + " A", "Q" + k, k, str("{\"id\": ", i, "}")}).ok());
  }
}

// Polls every 2 ms until `n` replies came (or fatal, or `limit`); fails the test on a duplicate.
// `on_poll` sees the client after each poll.
std::map<uint64_t, RewardReply> collect(HttpRewardClient& client, size_t n, std::chrono::milliseconds limit,
                                        const std::function<void(const HttpRewardClient&)>& on_poll = {}) {
  std::map<uint64_t, RewardReply> replies;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (replies.size() < n && client.fatal().ok() && std::chrono::steady_clock::now() < deadline) {
    for (RewardReply& r : client.poll()) {
      const uint64_t key = r.key;
      EXPECT_TRUE(replies.emplace(key, std::move(r)).second) << "item " << key << " answered twice";
    }
    if (on_poll) on_poll(client);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return replies;
}

// Polls until fatal() is set (or `limit`).
void poll_until_fatal(HttpRewardClient& client, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (client.fatal().ok() && std::chrono::steady_clock::now() < deadline) {
    EXPECT_THAT(client.poll(), ::testing::IsEmpty());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::vector<uint64_t> iota_keys(int n) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < n; ++i) keys.push_back(static_cast<uint64_t>(i));
  return keys;
}

// ---------------------------------------------------------------- the example server

TEST(HttpReward, ExampleServerScoresEverySampleInBatches) {
  auto server = RewardServerProcess::start(kExampleServer, {});
  ASSERT_TRUE(server->ok()) << server->log();
  HttpRewardOptions o = fast_options(server->url());
  o.batch_size = 64;
  o.max_in_flight = 4;
  auto client = make_client(o);
  ASSERT_NE(client, nullptr);
  // Even keys answer right (GSM8K label, \boxed{} answer), odd ones wrong, every tenth no number.
  for (uint64_t i = 0; i < 200; ++i) {
    const std::string prompt = str("Q", i, ": how many?");
    const std::string completion = i % 10 == 9 ? " no idea" : str(" so \\boxed{", i % 2 == 0 ? i + 1000 : i + 1, "}");
    ASSERT_TRUE(client->submit({i, prompt + completion, prompt, str("work...\n#### ", i + 1000)}).ok());
  }
  EXPECT_EQ(client->waiting(), 200u);
  const auto replies = collect(*client, 200, std::chrono::seconds(10));
  ASSERT_EQ(replies.size(), 200u);
  for (const auto& [key, r] : replies) {
    EXPECT_EQ(r.reward, key % 2 == 0 ? 1.0 : 0.0) << key;
    EXPECT_EQ(r.score, r.reward);
    EXPECT_EQ(r.extra.at("correct"), r.reward);
    EXPECT_EQ(r.extra.at("has_number"), key % 10 == 9 ? 0.0 : 1.0) << key;
  }
  const HttpRewardClient::Stats s = client->stats();
  EXPECT_EQ(s.requests, 4);  // 64 + 64 + 64 + 8
  EXPECT_EQ(s.failed_requests, 0);
  EXPECT_EQ(s.items_scored, 200);
  EXPECT_EQ(s.items_waited, 0);
  EXPECT_GT(s.round_trip_median_seconds, 0.0);
  EXPECT_GE(s.round_trip_max_seconds, s.round_trip_median_seconds);
  EXPECT_EQ(client->waiting(), 0u);
  EXPECT_TRUE(client->fatal().ok());
  EXPECT_THAT(client->abandon(), ::testing::IsEmpty());
}

TEST(HttpReward, ExampleServerAnswersBadRequestsWith400) {
  auto server = RewardServerProcess::start(kExampleServer, {});
  ASSERT_TRUE(server->ok()) << server->log();
  const int port = std::stoi(server->url().substr(server->url().rfind(':') + 1));
  for (const std::string& body : {std::string("not json"), std::string("[1, 2]"), std::string("{\"query\": 3}"),
                                  std::string("{\"query\": [\"a\"], \"labels\": []}")}) {
    const testing::HttpResponse r = testing::http_post(port, "/", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_THAT(r.body, HasSubstr("\"error\"")) << body;
  }
  EXPECT_EQ(testing::http_get(port, "/").status, 200);  // still up
}

TEST(HttpReward, ExampleServerAnswersAsNumericAnswerDoes) {
  // The server's Python copy of the rules against verifiers.cc, on hand-picked texts and on
  // random ones built from the characters the rules care about. (-B: no __pycache__ in the tree.)
  std::vector<std::string> texts = {"#### 72", "x #### Step 1\n 5", "\\boxed{\\frac{3}{4}}", "-$1,234.50",
                                    "3-4", "(−4)", "1,23", "8/4", "5/0", ".5.", "\\boxed{x} 3", "#### 2\n#### y"};
  const char* pieces[] = {"0", "1", "7", "9", ".", ",", "-", "+", "$", "#", "####", "/", "\\boxed{", "\\frac{",
                          "}{", "{", "}", " ", "\n", "a", "x", "−", "000", "e", "(", ")"};
  std::mt19937 rng(testing::test_seed());
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    for (int n = static_cast<int>(rng() % 24); n > 0; --n) t += pieces[rng() % std::size(pieces)];
    texts.push_back(t);
  }
  testing::TempDir dir;
  const std::string cases = dir.write("cases.json", nlohmann::json(texts).dump());
  Result<std::string> out = run_and_capture(
      {"python3", "-B", "-c",
       "import json, sys; sys.path.insert(0, sys.argv[1]); import reward_server as r; "
       "print(json.dumps([r.numeric_answer(t) for t in json.load(open(sys.argv[2]))]))",
       std::string(RLRUN_SOURCE_DIR) + "/examples", cases});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const nlohmann::json python = nlohmann::json::parse(*out);
  ASSERT_EQ(python.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::optional<std::string> cpp = numeric_answer(texts[i]);
    const nlohmann::json want = cpp ? nlohmann::json(*cpp) : nlohmann::json(nullptr);
    EXPECT_EQ(python[i], want) << "\"" << texts[i] << "\"";
  }
}

// ---------------------------------------------------------------- limits and what arrives

TEST(HttpReward, KeepsAtMostMaxInFlightAndSendsEverySamplesFields) {
  // Every answer takes 150 ms, so requests overlap as much as the client lets them.
  auto server = RewardServerProcess::start(kFaultyServer, {"--mode", "ok", "--delay", "0.15"});
  ASSERT_TRUE(server->ok()) << server->log();
  HttpRewardOptions o = fast_options(server->url());
  o.batch_size = 10;
  o.max_in_flight = 2;
  auto client = make_client(o);
  ASSERT_NE(client, nullptr);
  submit_numbered(*client, 60);
  int64_t most_in_flight = 0;
  const auto replies = collect(*client, 60, std::chrono::seconds(10), [&](const HttpRewardClient& c) {
    most_in_flight = std::max(most_in_flight, c.stats().in_flight);
  });
  ASSERT_EQ(replies.size(), 60u);
  EXPECT_EQ(most_in_flight, 2);
  double most_concurrent = 0;
  std::set<double> connections;
  for (const auto& [key, r] : replies) {
    connections.insert(r.extra.at("client_port"));
    EXPECT_EQ(r.reward, static_cast<double>(key));  // the label arrived with its sample
    EXPECT_EQ(r.extra.at("meta_id"), static_cast<double>(key));  // and the metadata
    EXPECT_EQ(r.extra.at("prompt_ok"), 1.0);  // and the prompt, at the front of the query
    EXPECT_EQ(r.extra.at("batch"), 10.0);
    most_concurrent = std::max(most_concurrent, r.extra.at("concurrent"));
  }
  EXPECT_EQ(most_concurrent, 2.0);  // as the server saw it
  EXPECT_LE(connections.size(), 2u);  // six requests on two kept-alive connections
  EXPECT_EQ(client->stats().requests, 6);
  EXPECT_EQ(client->stats().items_waited, 40);  // all but the first two batches
}

TEST(HttpReward, ItemsSubmittedWhileSlotsAreBusyGatherIntoOneRequest) {
  auto server = RewardServerProcess::start(kFaultyServer, {"--mode", "ok", "--delay", "0.2"});
  ASSERT_TRUE(server->ok()) << server->log();
  HttpRewardOptions o = fast_options(server->url());
  o.batch_size = 64;
  o.max_in_flight = 1;
  auto client = make_client(o);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->submit({1000, "Q A", "Q", "1000"}).ok());
  client->poll();  // sends a request of one
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE(client->submit({i, "Q A", "Q", std::to_string(i)}).ok());
  const auto replies = collect(*client, 31, std::chrono::seconds(10));
  ASSERT_EQ(replies.size(), 31u);
  EXPECT_EQ(client->stats().requests, 2);
  EXPECT_EQ(replies.at(0).extra.at("batch"), 30.0);
}

TEST(HttpReward, SubmitRefusesADuplicateKeyAndMetadataThatIsNotAnObject) {
  auto client = make_client(fast_options("http://127.0.0.1:1/"));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->submit({7, "q", "p", "l"}).ok());
  Status dup = client->submit({7, "q", "p", "l"});
  EXPECT_THAT(dup.message(), HasSubstr("7 is already waiting"));
  Status meta = client->submit({8, "q", "p", "l", "[1]"});
  EXPECT_THAT(meta.message(), HasSubstr("metadata is not a JSON object"));
  EXPECT_FALSE(client->submit({9, "q", "p", "l", "{bad"}).ok());
  EXPECT_EQ(client->waiting(), 1u);
  EXPECT_EQ(client->abandon(), std::vector<uint64_t>{7});
}

TEST(HttpReward, CreateRefusesBadOptionsNamingTheKey) {
  HttpRewardOptions o = fast_options("ftp://example.com/");
  Result<std::unique_ptr<HttpRewardClient>> c = HttpRewardClient::create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("task.reward_url \"ftp://example.com/\""));
  o = fast_options("http://127.0.0.1:1/");
  o.batch_size = 0;
  c = HttpRewardClient::create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("task.reward_batch_size"));
}

TEST(HttpReward, OptionsComeFromTheTaskKeys) {
  TaskSection t;
  t.reward_url = "http://h:1/r";
  t.reward_timeout_seconds = 3;
  t.reward_max_failures = 4;
  t.reward_batch_size = 5;
  t.reward_max_in_flight = 6;
  const HttpRewardOptions o = http_reward_options(t);
  EXPECT_EQ(o.url, "http://h:1/r");
  EXPECT_EQ(o.timeout_seconds, 3);
  EXPECT_EQ(o.max_failures, 4);
  EXPECT_EQ(o.batch_size, 5);
  EXPECT_EQ(o.max_in_flight, 6);
}

// ---------------------------------------------------------------- faults

TEST(HttpReward, BackoffDoublesUpToItsMaximum) {
  HttpRewardOptions o;
  o.first_backoff_seconds = 0.5;
  o.max_backoff_seconds = 3;
  EXPECT_EQ(http_reward_backoff_seconds(o, 1), 0.5);
  EXPECT_EQ(http_reward_backoff_seconds(o, 2), 1.0);
  EXPECT_EQ(http_reward_backoff_seconds(o, 3), 2.0);
  EXPECT_EQ(http_reward_backoff_seconds(o, 4), 3.0);
  EXPECT_EQ(http_reward_backoff_seconds(o, 1000000), 3.0);
}

TEST(HttpReward, NoRequestIsSentBeforeTheBackoffEnds) {
  auto server = RewardServerProcess::start(kFaultyServer, {"--mode", "http500", "--count", "2"});
  ASSERT_TRUE(server->ok()) << server->log();
  HttpRewardOptions o = fast_options(server->url());
  o.max_in_flight = 1;
  o.first_backoff_seconds = 0.1;
  o.max_backoff_seconds = 1;
  auto client = make_client(o);
  ASSERT_NE(client, nullptr);
  submit_numbered(*client, 1);
  // When each request was seen failing, and when the reply came.
  std::vector<std::chrono::steady_clock::time_point> failed;
  const auto replies = collect(*client, 1, std::chrono::seconds(5), [&](const HttpRewardClient& c) {
    if (c.stats().failed_requests > static_cast<int64_t>(failed.size()))
      failed.push_back(std::chrono::steady_clock::now());
  });
  const auto answered = std::chrono::steady_clock::now();
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_EQ(failed.size(), 2u);
  const auto slack = std::chrono::milliseconds(5);  // a failure is seen up to one poll late
  EXPECT_GE(failed[1] - failed[0], std::chrono::milliseconds(100) - slack);
  EXPECT_GE(answered - failed[1], std::chrono::milliseconds(200) - slack);
  EXPECT_EQ(client->stats().requests, 3);
}

struct Fault {
  std::string mode;
  std::string says;  // in fatal()'s message when the server never recovers
};

std::ostream& operator<<(std::ostream& os, const Fault& f) { return os << f.mode; }

// The double misbehaves for `count` requests (-1: always); the client times out after 0.3 s and
// takes replies of up to 1 MiB.
std::pair<std::unique_ptr<RewardServerProcess>, std::unique_ptr<HttpRewardClient>> faulty(const Fault& f, int count,
                                                                                         int64_t max_failures) {
  auto server = RewardServerProcess::start(
      kFaultyServer, {"--mode", f.mode, "--count", std::to_string(count), "--sleep", "1.0", "--huge-bytes", "2097152"});
  if (!server->ok()) return {std::move(server), nullptr};
  HttpRewardOptions o = fast_options(server->url());
  o.timeout_seconds = 0.3;
  o.max_failures = max_failures;
  o.max_response_bytes = 1 << 20;
  return {std::move(server), make_client(o)};
}

class HttpRewardFault : public ::testing::TestWithParam<Fault> {};

TEST_P(HttpRewardFault, ItemsAreRetriedAndAllScoredOnceTheServerRecovers) {
  auto [server, client] = faulty(GetParam(), 2, 5);
  ASSERT_TRUE(server->ok()) << server->log();
  ASSERT_NE(client, nullptr);
  submit_numbered(*client, 20);
  const auto replies = collect(*client, 20, std::chrono::seconds(8));
  ASSERT_TRUE(client->fatal().ok()) << client->fatal().message();
  ASSERT_EQ(replies.size(), 20u);
  for (const auto& [key, r] : replies) EXPECT_EQ(r.reward, static_cast<double>(key));
  const HttpRewardClient::Stats s = client->stats();
  EXPECT_EQ(s.failed_requests, 2);  // the two sent at first; then one probe that succeeded
  EXPECT_EQ(s.items_retried, 16);
  EXPECT_EQ(s.items_scored, 20);
  EXPECT_EQ(s.failures_in_row, 0);
  EXPECT_EQ(client->waiting(), 0u);
}

TEST_P(HttpRewardFault, ServerThatNeverRecoversIsFatalAfterMaxFailures) {
  auto [server, client] = faulty(GetParam(), -1, 3);
  ASSERT_TRUE(server->ok()) << server->log();
  ASSERT_NE(client, nullptr);
  submit_numbered(*client, 16);
  poll_until_fatal(*client, std::chrono::seconds(8));
  const std::string& m = client->fatal().message();
  ASSERT_FALSE(client->fatal().ok());
  EXPECT_THAT(m, HasSubstr(server->url()));
  EXPECT_THAT(m, HasSubstr("3 requests failed in a row"));
  EXPECT_THAT(m, HasSubstr(GetParam().says));
  const HttpRewardClient::Stats s = client->stats();
  EXPECT_EQ(s.failed_requests, 3);
  EXPECT_EQ(s.items_scored, 0);
  // Nothing more is sent; every item is still waiting, and abandon() names each once.
  for (int i = 0; i < 20; ++i) client->poll();
  EXPECT_EQ(client->stats().requests, s.requests);
  EXPECT_EQ(client->waiting(), 16u);
  std::vector<uint64_t> keys = client->abandon();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, iota_keys(16));
  EXPECT_EQ(client->waiting(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, HttpRewardFault,
    ::testing::Values(Fault{"slow", "Timeout was reached"}, Fault{"drop", "Empty reply from server"},
                      Fault{"garbage", "the reply is not JSON; the reply: <html>this is not JSON</html>"},
                      Fault{"wrong_count", "7 rewards for 8 samples"}, Fault{"nan", "rewards[7] is NaN"},
                      Fault{"http500", "HTTP 500: {\"error\": \"the reward model is out of memory\"}"},
                      Fault{"huge", "the reply is larger than 1048576 bytes"},
                      Fault{"short_extra", "extra_logs \"batch\" has 7 entries for 8 samples"}),
    [](const ::testing::TestParamInfo<Fault>& info) { return info.param.mode; });

TEST(HttpReward, WhileRequestsFailOneAtATimeProbesTheServer) {
  auto server = RewardServerProcess::start(kFaultyServer, {"--mode", "http500"});
  ASSERT_TRUE(server->ok()) << server->log();
  HttpRewardOptions o = fast_options(server->url());
  o.max_in_flight = 3;
  o.max_failures = 6;
  auto client = make_client(o);
  ASSERT_NE(client, nullptr);
  submit_numbered(*client, 40);
  int64_t most_in_flight_while_failing = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (client->fatal().ok() && std::chrono::steady_clock::now() < deadline) {
    client->poll();
    const HttpRewardClient::Stats s = client->stats();
    if (s.failures_in_row >= 3) most_in_flight_while_failing = std::max(most_in_flight_while_failing, s.in_flight);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(client->fatal().ok());
  EXPECT_EQ(client->stats().failed_requests, 6);  // the first three together, then three probes
  EXPECT_EQ(most_in_flight_while_failing, 1);
}

TEST(HttpReward, ServerThatIsDownThenUpScoresEverything) {
  // Bound but not listening for 0.4 s: connections are refused, then it answers.
  auto server = RewardServerProcess::start(kFaultyServer, {"--mode", "down", "--down-seconds", "0.4"});
  ASSERT_TRUE(server->ok()) << server->log();
  HttpRewardOptions o = fast_options(server->url());
  o.max_failures = 1000;
  auto client = make_client(o);
  ASSERT_NE(client, nullptr);
  submit_numbered(*client, 20);
  const auto replies = collect(*client, 20, std::chrono::seconds(8));
  ASSERT_EQ(replies.size(), 20u);
  EXPECT_GE(client->stats().failed_requests, 2);
  EXPECT_TRUE(client->fatal().ok());
}

TEST(HttpReward, NothingListeningIsFatalNamingTheUrlAndCurlsError) {
  const std::string url = str("http://127.0.0.1:", testing::pick_free_port(), "/reward");
  HttpRewardOptions o = fast_options(url);
  o.max_failures = 3;
  auto client = make_client(o);
  ASSERT_NE(client, nullptr);
  submit_numbered(*client, 30);
  poll_until_fatal(*client, std::chrono::seconds(5));
  ASSERT_FALSE(client->fatal().ok());
  EXPECT_THAT(client->fatal().message(), HasSubstr("reward server " + url + ": 3 requests failed in a row"));
  EXPECT_THAT(client->fatal().message(), HasSubstr("Couldn't connect to server"));
  std::vector<uint64_t> keys = client->abandon();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, iota_keys(30));
}

// ---------------------------------------------------------------- the reply, byte by byte

TEST(ParseRewardReply, ReadsRewardsScoresAndExtraLogs) {
  Result<std::vector<RewardReply>> r = parse_reward_reply(
      R"({"rewards": [1, 0.5], "scores": [2, 3], "extra_logs": {"acc": [1, 0], "ok": [true, false]}})", {10, 11});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].key, 10u);
  EXPECT_EQ((*r)[1].reward, 0.5);
  EXPECT_EQ((*r)[1].score, 3);
  EXPECT_EQ((*r)[0].extra.at("ok"), 1.0);
  EXPECT_EQ((*r)[1].extra.at("acc"), 0.0);
  r = parse_reward_reply(R"({"rewards": [-2]})", {5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].score, -2);  // no scores: the reward
  EXPECT_TRUE((*r)[0].extra.empty());
}

TEST(ParseRewardReply, SaysWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not JSON"},
      {"{\"rewards\": [1, 2", "not JSON"},
      {"[1, 2, 3]", "not a JSON object"},
      {"{\"reward\": [1, 2, 3]}", "no \"rewards\""},
      {"{\"rewards\": 3}", "rewards is not an array"},
      {"{\"rewards\": [1, 2]}", "2 rewards for 3 samples"},
      {"{\"rewards\": [1, 2, 3, 4]}", "4 rewards for 3 samples"},
      {"{\"rewards\": [1, 2, NaN]}", "rewards[2] is NaN"},
      {"{\"rewards\": [1, -Infinity, 3]}", "rewards[1] is -Infinity"},
      {"{\"rewards\": [1, 2, 1e999]}", "not JSON"},
      {"{\"rewards\": [1, \"2\", 3]}", "rewards[1] is not a number: \"2\""},
      {"{\"rewards\": [1, true, 3]}", "rewards[1] is not a number: true"},
      {"{\"rewards\": [1, null, 3]}", "rewards[1] is not a number: null"},
      {"{\"rewards\": [1, 2, 3], \"scores\": [1]}", "scores has 1 entries for 3 samples"},
      {"{\"rewards\": [1, 2, 3], \"extra_logs\": [1, 2, 3]}", "extra_logs is not an object"},
      {"{\"rewards\": [1, 2, 3], \"extra_logs\": {\"a\": [1, 2]}}", "extra_logs \"a\" has 2 entries for 3 samples"},
      {"{\"rewards\": [1, 2, 3], \"extra_logs\": {\"a\": [1, {}, 2]}}", "extra_logs \"a\"[1] is not a number: {}"},
      {"{\"rewards\": [1, 2, 3], \"extra_logs\": {\"a\": [1, NaN, 2]}}", "extra_logs \"a\"[1] is NaN"},
      // A "NaN" inside a string is text, not a number.
      {"{\"rewards\": [1, 2, 3], \"note\": \"NaN \\\" NaN\", \"extra_logs\": {\"NaN\": [1, 2]}}",
       "extra_logs \"NaN\" has 2 entries"},
  };
  for (const auto& [body, says] : cases) {
    Result<std::vector<RewardReply>> r = parse_reward_reply(body, {1, 2, 3});
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_THAT(r.status().message(), HasSubstr(says)) << body;
  }
}

TEST(ParseRewardReply, HostileBodiesAreErrorsNotCrashes) {
  std::string many_names = "{\"rewards\": [1], \"extra_logs\": {";
  for (int i = 0; i < 1000; ++i) many_names += str(i ? "," : "", "\"n", i, "\": [1]");
  many_names += "}}";
  EXPECT_THAT(parse_reward_reply(many_names, {1}).status().message(), HasSubstr("1000 names"));
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  EXPECT_THAT(parse_reward_reply(deep, {1}).status().message(), HasSubstr("not a JSON object"));
  const std::string deep_open = "{\"rewards\": " + std::string(1 << 20, '[');
  EXPECT_THAT(parse_reward_reply(deep_open, {1}).status().message(), HasSubstr("not JSON"));
  std::string binary(1 << 20, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 131 % 251);
  EXPECT_FALSE(parse_reward_reply(binary, {1}).ok());
  EXPECT_FALSE(parse_reward_reply(std::string(1 << 20, 'N') + "NaN", {1}).ok());
}

}  // namespace
}  // namespace rlrun::orchestrator
