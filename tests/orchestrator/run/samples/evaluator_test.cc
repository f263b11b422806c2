// Evaluator (run/samples/evaluator.h): every held-out problem is asked once, round-robin over the
// ready rollout workers, or run as an episode; one that cannot be asked counts as wrong; with no
// worker ready the requests wait in the Dispatcher; the accuracy counts right answers over all
// problems, and a loop error ends the wait.
#include "orchestrator/run/samples/evaluator.h"

#include <gtest/gtest.h>

#include "common/config/reward_expr.h"
#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using testing::PartEnv;

Problem problem(const std::string& prompt, const std::string& answer) {
  Problem p;
  p.prompt = prompt;
  p.answer = answer;
  return p;
}

struct EvaluatorTest : ::testing::Test {
  PartEnv env;
  testing::FixedTask task{{problem("one", "a"), problem("two", "b"), problem("three", "c")}};
  RewardFunction reward = RewardFunction::create(parse_reward_expression("task").value(), env.config.task, task).value();
  std::vector<std::pair<int, GenerateRequest>> requests;
  Dispatcher dispatcher{DispatchOptions{}, env.workers, [this](int w, const GenerateRequest& r) {
                          requests.push_back({w, r});
                          return Status();
                        }};
  std::vector<uint64_t> episodes;  // problems run as episodes
  std::vector<std::pair<int64_t, std::vector<nlohmann::ordered_json>>> logged;

  Evaluator make(std::function<bool(const Problem&)> runs = {}) {
    env.config.task.eval_size = 3;
    return Evaluator(env.config, task, env.format, env.tokenizer, reward, dispatcher, env.workers, *env.metrics,
                     env.port.port(), Evaluator::Episodes{runs, [this](uint64_t p) { episodes.push_back(p); }},
                     [this](int64_t step, const std::vector<nlohmann::ordered_json>& shown) { logged.push_back({step, shown}); });
  }
  // Answers every request sent so far with `text` (the same for all), as its worker would.
  void answer(Evaluator& e, const std::map<uint64_t, std::string>& texts) {
    for (const auto& [worker, request] : std::exchange(requests, {})) {
      GenerateResult r;
      r.request_id = request.request_id;
      r.finish_reason = FinishReason::kStop;
      const Dispatcher::Routed routed = dispatcher.route(r);
      ASSERT_EQ(routed.kind, Dispatcher::Routed::Kind::kEval);
      r.token_ids = env.ids(texts.at(routed.problem));
      e.on_result(routed.problem, r);
    }
  }
};

TEST_F(EvaluatorTest, EveryProblemIsAskedOnceRoundRobinAndTheAccuracyCountsRightAnswers) {
  Evaluator e = make();
  bool running_in_wait = false;
  env.port.turn = [&] {
    running_in_wait = e.running();
    answer(e, {{0, "a"}, {1, "wrong"}, {2, "c"}});
  };
  Result<std::optional<double>> accuracy = e.evaluate("before training", 0, 5);
  ASSERT_TRUE(accuracy.ok()) << accuracy.status().message();
  ASSERT_TRUE(accuracy->has_value());
  EXPECT_DOUBLE_EQ(**accuracy, 2.0 / 3.0);
  EXPECT_TRUE(running_in_wait) << "a trainer failure found meanwhile waits for the end";
  EXPECT_FALSE(e.running());
  EXPECT_EQ(env.port.dispatched_in_waits, std::vector<bool>{false}) << "no training work is dispatched meanwhile";
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_EQ(logged[0].second.size(), 3u) << "the first kLoggedSamples problems' answers";
  EXPECT_EQ(logged[0].second[1]["completion"], "wrong");
  EXPECT_EQ(logged[0].second[1]["correct"], false);
  EXPECT_EQ(e.last_accuracy(), 2.0 / 3.0);
}

TEST_F(EvaluatorTest, RequestsGoToReadyWorkersInTurnWithTheVersionAsked) {
  Evaluator e = make();
  std::vector<int> workers;
  env.port.turn = [&] {
    for (const auto& [w, r] : requests) {
      workers.push_back(w);
      EXPECT_EQ(r.min_weight_version, 5u);
      EXPECT_EQ(r.num_samples, 1u);
    }
    answer(e, {{0, "a"}, {1, "b"}, {2, "c"}});
  };
  ASSERT_TRUE(e.evaluate("at step 5", 5, 5).ok());
  EXPECT_EQ(workers, (std::vector<int>{1, 2, 1})) << "the rollout workers in turn, never the trainer";
}

TEST_F(EvaluatorTest, AProblemThatCannotBeAskedIsWrongAndEpisodesGoToTheEnvironment) {
  env.config.max_model_len = env.config.max_tokens + 1;  // no prompt of more than 1 token fits
  task = testing::FixedTask({problem("a question that is far too long", "a"), problem("ep", "b"), problem("x", "c")});
  Evaluator e = make([](const Problem& p) { return p.prompt == "ep"; });
  env.port.turn = [&] {
    if (!episodes.empty()) e.on_episode(episodes.front(), true);
    answer(e, {{2, "c"}});
  };
  Result<std::optional<double>> accuracy = e.evaluate("after training", 3, 3);
  ASSERT_TRUE(accuracy.ok()) << accuracy.status().message();
  EXPECT_EQ(episodes, std::vector<uint64_t>{1});
  EXPECT_DOUBLE_EQ(**accuracy, 2.0 / 3.0) << "the long one wrong, the episode and the short one right";
}

TEST_F(EvaluatorTest, WithNoWorkerReadyTheRequestsWaitInTheDispatcher) {
  for (WorkerSlot& w : env.workers) w.state = WorkerState::kNeedsWeights;
  Evaluator e = make();
  env.port.turn = [&] {
    if (env.port.turns == 3)
      for (WorkerSlot& w : env.workers) w.state = WorkerState::kReady;
    dispatcher.send_requeued();  // as the loop does every turn
    answer(e, {{0, "a"}, {1, "b"}, {2, "c"}});
  };
  Result<std::optional<double>> accuracy = e.evaluate("before training", 0, 0);
  ASSERT_TRUE(accuracy.ok());
  EXPECT_DOUBLE_EQ(**accuracy, 1.0);
  EXPECT_GE(env.port.turns, 3);
}

TEST_F(EvaluatorTest, ALoopErrorEndsTheEvaluationAndNoEvaluationSetMeansNoAccuracy) {
  Evaluator e = make();
  env.port.max_turns = 5;  // nobody answers
  Result<std::optional<double>> accuracy = e.evaluate("before training", 0, 0);
  EXPECT_FALSE(accuracy.ok());
  EXPECT_FALSE(e.running());
  EXPECT_TRUE(logged.empty());

  task = testing::FixedTask(std::vector<Problem>{});
  Evaluator none = make();
  Result<std::optional<double>> nothing = none.evaluate("before training", 0, 0);
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->has_value());
  none.set_after(std::nullopt, "not measured: interrupted");
  EXPECT_EQ(none.stats().accuracy_after_note, "not measured: interrupted");
}

}  // namespace
}  // namespace rlrun::orchestrator
