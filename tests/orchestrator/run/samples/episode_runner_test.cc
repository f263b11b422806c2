// EpisodeRunner (run/samples/episode_runner.h), with the gateway unserved and the environment a
// double: each sample of an episode group is an attempt at the weights of the moment; a failed
// attempt is retried, then its sample discarded and the failure listed, and too many failed
// episodes stop the run; an episode without a turn is discarded; off-policy ones are cancelled;
// an evaluation episode's verdict goes to the evaluator; what runs at the end is counted.
#include "orchestrator/run/samples/episode_runner.h"

#include <gtest/gtest.h>

#include "common/config/reward_expr.h"
#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using Json = nlohmann::ordered_json;
using testing::PartEnv;

struct FakeEnvironment : EpisodeEnvironment {
  std::map<uint64_t, Json> started;  // attempt key -> body
  std::vector<uint64_t> abandoned;
  std::vector<EpisodeEnd> ends;  // the next poll's
  void start(uint64_t key, std::string body) override { started[key] = Json::parse(body); }
  std::vector<EpisodeEnd> poll() override { return std::exchange(ends, {}); }
  void abandon(uint64_t key) override { abandoned.push_back(key); }
  void fail(uint64_t key) {
    EpisodeEnd end;
    end.key = key;
    end.error = "connection refused";
    ends.push_back(end);
  }
  void reply(uint64_t key, double reward, std::optional<bool> correct = std::nullopt) {
    EpisodeEnd end;
    end.key = key;
    end.ok = true;
    end.reply.reward = reward;
    end.reply.has_correct = correct.has_value();
    end.reply.correct = correct.value_or(false);
    end.reply.metrics["steps"] = 3;
    ends.push_back(end);
  }
};

Problem row(const std::string& prompt, const std::string& metadata = "{}") {
  Problem p;
  p.prompt = prompt;
  p.answer = "42";
  p.metadata_json = metadata;
  return p;
}

struct EpisodeRunnerTest : ::testing::Test {
  PartEnv env;
  testing::FixedTask task{{row("eval question")}};
  RewardFunction reward = RewardFunction::create(parse_reward_expression("task").value(), env.config.task, task).value();
  Dispatcher dispatcher{[] {
                          DispatchOptions o;
                          o.group_size = 2;
                          return o;
                        }(),
                        env.workers, [](int, const GenerateRequest&) { return Status(); }};
  std::unique_ptr<RewardStage> rewards;
  std::vector<Dispatcher::Group> completed;
  std::vector<std::pair<uint64_t, bool>> evaluated;
  FakeEnvironment* environment = nullptr;

  std::unique_ptr<EpisodeRunner> make() {
    env.config.task.environment_url = "http://env.test";
    env.config.task.environment_max_attempts = 2;
    env.config.task.environment_max_failed_episodes = 3;
    rewards = std::make_unique<RewardStage>(env.config, reward, nullptr, env.format, dispatcher, env.ledger,
                                            *env.metrics, env.profile, env.steps,
                                            [](int, const ScoreRequest&) { return Status(); });
    auto runner = std::make_unique<EpisodeRunner>(
        env.config, env.tokenizer, task, dispatcher, env.workers, env.ledger, *env.metrics, *rewards, env.steps,
        env.port.port(),
        EpisodeRunner::Hooks{[](int, const GenerateRequest&) { return Status(); },
                             [this](Dispatcher::Group g) { completed.push_back(std::move(g)); },
                             [this](uint64_t p, bool correct) { evaluated.push_back({p, correct}); }});
    auto fake = std::make_unique<FakeEnvironment>();
    environment = fake.get();
    runner->start(EpisodeGateway::unserved(GatewayOptions{}, orchestrator::openai::ServedModel("policy", env.tokenizer)),
                  std::move(fake));
    return runner;
  }
  uint64_t admit(EpisodeRunner& runner, const Problem& p) {
    const uint64_t group = dispatcher.admit_episodes(p, env.steps.version());
    for (uint32_t i = 0; i < 2; ++i) env.ledger.dispatched(dispatcher.sample_id(group, i));
    runner.start_group(group);
    return group;
  }
};

TEST_F(EpisodeRunnerTest, TheFieldPicksTheRowsAndEachSampleIsAnAttemptAtTheCurrentVersion) {
  std::unique_ptr<EpisodeRunner> runner = make();
  EXPECT_TRUE(runner->runs(row("any")));
  env.config.task.environment_field = "tools";
  EXPECT_FALSE(runner->runs(row("plain")));
  EXPECT_FALSE(runner->runs(row("off", R"({"tools": false})")));
  EXPECT_TRUE(runner->runs(row("on", R"({"tools": ["calculator"]})")));

  env.steps.completed = 4;
  admit(*runner, row("what is 6 x 7?", R"({"level": 2})"));
  ASSERT_EQ(environment->started.size(), 2u);
  const Json& body = environment->started.begin()->second;
  EXPECT_EQ(body["episode_id"], "0");
  EXPECT_EQ(body["attempt"], 1);
  EXPECT_EQ(body["row"]["prompt"], "what is 6 x 7?");
  EXPECT_EQ(body["row"]["answer"], "42");
  EXPECT_EQ(body["row"]["level"], 2);
  EXPECT_EQ(body["eval"], false);
  EXPECT_NE(body["base_url"].get<std::string>().find("/sessions/"), std::string::npos);
  EXPECT_EQ(runner->stats().started, 2);
  EXPECT_EQ(runner->stats().url, "http://env.test");
}

TEST_F(EpisodeRunnerTest, AFailedAttemptIsRetriedThenItsSampleIsDiscardedAndTheFailureListed) {
  std::unique_ptr<EpisodeRunner> runner = make();
  const uint64_t group = admit(*runner, row("q"));
  environment->fail(1);
  environment->fail(2);
  ASSERT_TRUE(runner->poll().ok());
  EXPECT_EQ(environment->started.size(), 4u) << "each sample's second attempt";
  EXPECT_EQ(runner->stats().retried, 2);
  environment->fail(3);
  environment->fail(4);
  ASSERT_TRUE(runner->poll().ok());
  EXPECT_EQ(runner->stats().failed, 2);
  ASSERT_EQ(runner->stats().failures.size(), 2u);
  EXPECT_NE(runner->stats().failures[0].find("connection refused (2 attempts)"), std::string::npos);
  ASSERT_EQ(completed.size(), 1u) << "its samples are all back: the group goes on, failed";
  EXPECT_EQ(completed[0].id, group);
  EXPECT_TRUE(completed[0].failed);
  EXPECT_EQ(env.ledger.summary().discarded.at("episode_failed"), 2);
  EXPECT_EQ(runner->stats().started, 2) << "an episode is counted once, its attempts each";
  EXPECT_EQ(runner->stats().attempts, 4);
}

TEST_F(EpisodeRunnerTest, TooManyFailedEpisodesStopTheRunNamingTheServer) {
  std::unique_ptr<EpisodeRunner> runner = make();
  admit(*runner, row("q1"));
  admit(*runner, row("q2"));
  Status s;
  for (int round = 0; round < 3 && s.ok(); ++round) {
    for (const auto& [key, body] : environment->started) environment->fail(key);
    environment->started.clear();
    s = runner->poll();
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("task.environment_max_failed_episodes = 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("http://env.test is not working"), std::string::npos) << s.message();
}

TEST_F(EpisodeRunnerTest, AnEpisodeWithoutATurnIsDiscardedAndTheServersMetricsGoToTheStepLine) {
  std::unique_ptr<EpisodeRunner> runner = make();
  admit(*runner, row("q"));
  environment->reply(1, 1.0);
  environment->reply(2, 0.0);
  ASSERT_TRUE(runner->poll().ok());
  EXPECT_EQ(runner->stats().completed, 2);
  EXPECT_EQ(env.ledger.summary().discarded.at("episode_no_turns"), 2) << "it made no call to learn from";
  ASSERT_EQ(completed.size(), 1u);
  EXPECT_TRUE(completed[0].failed);
  EXPECT_EQ(rewards->take_means().second.at("steps"), 3.0);
}

TEST_F(EpisodeRunnerTest, OffPolicyEpisodesAreCancelledAndWhatRunsAtTheEndIsCounted) {
  std::unique_ptr<EpisodeRunner> runner = make();
  admit(*runner, row("old"));
  env.steps.completed = 3;
  admit(*runner, row("new"));
  runner->cancel_off_policy([](uint64_t version) { return version < 3; });
  EXPECT_EQ(environment->abandoned, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(runner->stats().cancelled, 2);
  EXPECT_EQ(env.ledger.summary().cancelled, 2);
  ASSERT_EQ(completed.size(), 1u);
  runner->finish();
  EXPECT_EQ(runner->stats().in_flight_at_exit, 2);
  EXPECT_EQ(environment->abandoned.size(), 4u);
}

TEST_F(EpisodeRunnerTest, AnEvaluationEpisodesVerdictGoesToTheEvaluator) {
  std::unique_ptr<EpisodeRunner> runner = make();
  runner->start_eval(0);
  ASSERT_EQ(environment->started.size(), 1u);
  EXPECT_EQ(environment->started.begin()->second["episode_id"], "eval-0");
  EXPECT_EQ(environment->started.begin()->second["eval"], true);
  environment->reply(1, 0.0, true);
  ASSERT_TRUE(runner->poll().ok());
  ASSERT_EQ(evaluated.size(), 1u);
  EXPECT_EQ(evaluated[0], (std::pair<uint64_t, bool>{0, true})) << "\"correct\" decides, not the reward";
  runner->start_eval(0);
  environment->fail(2);
  ASSERT_TRUE(runner->poll().ok());
  environment->fail(3);
  ASSERT_TRUE(runner->poll().ok());
  ASSERT_EQ(evaluated.size(), 2u);
  EXPECT_FALSE(evaluated[1].second) << "an evaluation episode that failed counts as wrong";
}

}  // namespace
}  // namespace rlrun::orchestrator
