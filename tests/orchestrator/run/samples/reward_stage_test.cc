// RewardStage (run/samples/reward_stage.h): samples are scored by task.reward's terms as they come
// back; a complete group gets advantages and is ready for a batch, or is discarded with its reason
// (incomplete, no reward spread); with kl_reference_on: rollout a kept group waits for a rollout
// worker's KL reference scores, and goes on without them when the worker fails; what still waits
// at the end is accounted for.
#include "orchestrator/run/samples/reward_stage.h"

#include <gtest/gtest.h>

#include "common/config/reward_expr.h"
#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using Group = Dispatcher::Group;
using testing::PartEnv;

struct RewardStageTest : ::testing::Test {
  PartEnv env;
  testing::FixedTask task;
  std::unique_ptr<RewardFunction> reward;
  std::vector<GenerateRequest> requests;
  std::vector<std::pair<int, ScoreRequest>> scoring;
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<RewardStage> stage;

  void make(const std::string& expression = "task") {
    env.config.task.reward = expression;
    reward = std::make_unique<RewardFunction>(
        RewardFunction::create(parse_reward_expression(expression).value(), env.config.task, task).value());
    DispatchOptions o;
    o.group_size = 2;
    o.lanes_per_worker = 4;
    dispatcher = std::make_unique<Dispatcher>(o, env.workers, [this](int, const GenerateRequest& r) {
      requests.push_back(r);
      return Status();
    });
    stage = std::make_unique<RewardStage>(env.config, *reward, nullptr, env.format, *dispatcher, env.ledger, *env.metrics,
                                          env.profile, env.steps, [this](int worker, const ScoreRequest& r) {
                                            scoring.push_back({worker, r});
                                            return Status();
                                          });
  }
  // A group whose two samples answered `first` and `second`, scored as they came back.
  Group returned(const std::string& first, const std::string& second) {
    Problem p;
    p.prompt = "q";
    p.answer = "a";
    const uint64_t id = dispatcher->admit(p, env.ids("q"), 0);
    Group* g = nullptr;
    for (uint32_t i = 0; i < 2; ++i) {
      env.ledger.dispatched(dispatcher->sample_id(id, i));
      GenerateResult r;
      r.request_id = requests.back().request_id;
      r.sample_index = i;
      r.finish_reason = FinishReason::kStop;
      g = dispatcher->route(r).group;
      env.ledger.generated(dispatcher->sample_id(id, i));
      const std::string& text = i == 0 ? first : second;
      g->samples[i].completion = env.ids(text);
      stage->score(g->problem, g->samples[i], text, static_cast<int64_t>(g->samples[i].completion.size()));
    }
    return dispatcher->complete(id);
  }
};

TEST_F(RewardStageTest, AGroupWithASpreadGetsAdvantagesAndIsReadyForABatch) {
  make();
  stage->complete(returned("a", "b"));
  ASSERT_EQ(dispatcher->scored().size(), 1u);
  const Group& g = dispatcher->scored().front();
  EXPECT_EQ(g.samples[0].reward, 1.0);
  EXPECT_EQ(g.samples[1].reward, 0.0);
  EXPECT_GT(g.samples[0].advantage, 0.0f);
  EXPECT_LT(g.samples[1].advantage, 0.0f);
  const auto [terms, logs] = stage->take_means();
  EXPECT_EQ(terms.at("task"), 0.5) << "the term's mean over the samples scored";
  EXPECT_TRUE(stage->take_means().first.empty()) << "taken: the next step line starts afresh";
}

TEST_F(RewardStageTest, FailedAndZeroSpreadGroupsAreDiscardedWithTheirReason) {
  env.config.discard_group_zero_advantage = true;
  env.config.max_zero_spread_rounds = 0;
  make();
  Group failed = returned("a", "b");
  failed.failed = true;
  stage->complete(std::move(failed));
  stage->complete(returned("b", "b"));
  EXPECT_TRUE(dispatcher->scored().empty());
  const SampleLedger::Summary s = env.ledger.summary();
  EXPECT_EQ(s.discarded.at("group_incomplete"), 2);
  EXPECT_EQ(s.discarded.at("zero_advantage"), 2);
  EXPECT_EQ(stage->stats().zero_spread.kept, 0);
}

TEST_F(RewardStageTest, ANeverRewardedPolicyPastTheBoundSaysNoBatchCanForm) {
  env.config.discard_group_zero_advantage = true;
  env.config.max_zero_spread_rounds = 1;
  env.config.prompts_batch_size_for_trainer = 2;
  make();
  stage->complete(returned("x", "y"));
  EXPECT_TRUE(stage->stop_reason().empty());
  stage->complete(returned("x", "y"));
  EXPECT_NE(stage->stop_reason().find("the policy never succeeds"), std::string::npos) << stage->stop_reason();
}

TEST_F(RewardStageTest, WithTheRolloutScoringTheReferenceAKeptGroupWaitsForItsScores) {
  env.config.kl_coef = 0.1;
  env.config.kl_reference_on = KlReferenceOn::kRollout;
  make();
  stage->complete(returned("a", "b"));
  ASSERT_EQ(scoring.size(), 1u);
  EXPECT_TRUE(dispatcher->scored().empty());
  EXPECT_EQ(stage->groups_waiting(), 1) << "outstanding for the staleness gate";
  ScoreResult result;
  result.request_id = scoring[0].second.request_id;
  std::vector<float> ref(scoring[0].second.completion_ids.size(), -0.5f);
  result.ref_logprobs = ref;
  stage->on_score_result(result);
  ASSERT_EQ(dispatcher->scored().size(), 1u);
  EXPECT_EQ(dispatcher->scored().front().samples[0].ref_logprobs.size(), env.ids("a").size());

  stage->complete(returned("a", "b"));
  ASSERT_EQ(scoring.size(), 2u);
  stage->release_worker(scoring[1].first, "rollout-x");
  EXPECT_EQ(dispatcher->scored().size(), 2u) << "its worker failed: the trainer scores it";
  EXPECT_TRUE(dispatcher->scored().back().samples[0].ref_logprobs.empty());

  stage->complete(returned("a", "b"));
  stage->finish();
  EXPECT_EQ(env.ledger.summary().discarded.at("unused_at_exit"), 2) << "still waiting at the end";
  EXPECT_EQ(stage->stats().kl_reference_scored_by_rollout, 1);
  EXPECT_EQ(stage->stats().kl_reference_scored_by_trainer, 1);
  EXPECT_EQ(stage->stats().expression, "task");
  EXPECT_FALSE(stage->stats().server.has_value()) << "no http term";
}

}  // namespace
}  // namespace rlrun::orchestrator
