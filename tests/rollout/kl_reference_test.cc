// The rollout worker's copy of the KL reference (rollout/kl_reference.h): the log-probs it gives
// each completion token are the training path's, with the prompt shared by several samples or
// not, from the weights it captured however the policy moves on; bad input is an error.
#include <gtest/gtest.h>

#include "rollout/kl_reference.h"
#include "tests/rollout/rollout_test_util.h"

namespace rlrun::rollout {
namespace {

// The training path's log-prob of each completion token after `prompt`, under `model`.
std::vector<float> expected(engine::Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& completion) {
  const std::vector<std::vector<float>> lp = testing::training_logprobs(model, prompt, completion);
  std::vector<float> out;
  for (size_t i = 0; i < completion.size(); ++i) out.push_back(lp[completion[i]][i]);
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5) << "token " << i;
}

std::vector<std::vector<float>> score(KlReference& ref, const std::vector<int32_t>& prompt,
                                      const std::vector<std::vector<int32_t>>& completions) {
  const ScoredGroup group{prompt, std::vector<std::span<const int32_t>>(completions.begin(), completions.end())};
  Result<std::vector<std::vector<std::vector<float>>>> r = ref.score({&group, 1});
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->at(0) : std::vector<std::vector<float>>{};
}

TEST(KlReferenceScorer, GivesTheTrainingPathsLogprobsOfTheWeightsItCaptured) {
  auto backend = testing::cpu_backend();
  auto policy = testing::tiny_model(*backend, /*seed=*/4);
  auto same = testing::tiny_model(*backend, /*seed=*/4);  // what the reference must score like
  KlReference ref;
  EXPECT_FALSE(ref.captured());
  ASSERT_TRUE(ref.capture(*policy).ok());
  EXPECT_TRUE(ref.captured());
  policy->weights().init_random(9, 0.5f);  // the policy moves on; the reference must not

  const std::vector<int32_t> prompt = testing::prompt_of(7, 1);
  const std::vector<std::vector<int32_t>> group = {testing::prompt_of(5, 2), testing::prompt_of(1, 3), {},
                                                   testing::prompt_of(9, 4)};
  const auto shared = score(ref, prompt, group);  // several samples: the prompt computed once
  ASSERT_EQ(shared.size(), group.size());
  for (size_t i = 0; i < group.size(); ++i) expect_near(shared[i], expected(*same, prompt, group[i]));

  const auto alone = score(ref, prompt, {group[3]});  // one sample: a plain sequence
  expect_near(alone.at(0), expected(*same, prompt, group[3]));
  const std::vector<int32_t> one_token = {5};  // too short to share
  const auto short_prompt = score(ref, one_token, {group[0], group[3]});
  expect_near(short_prompt.at(1), expected(*same, one_token, group[3]));
  EXPECT_EQ(ref.samples_scored(), 7);

  // Capturing again takes the policy's weights as they are now.
  ASSERT_TRUE(ref.capture(*policy).ok());
  const auto moved = score(ref, prompt, {group[0]});
  EXPECT_GT(std::fabs(moved.at(0).at(0) - shared.at(0).at(0)), 1e-4);
  expect_near(moved.at(0), expected(*policy, prompt, group[0]));
}

// The groups that end in one turn are scored in one pass: each as if alone.
TEST(KlReferenceScorer, ScoresSeveralGroupsInOnePassAsEachAlone) {
  auto backend = testing::cpu_backend();
  auto policy = testing::tiny_model(*backend, /*seed=*/6);
  KlReference ref;
  ASSERT_TRUE(ref.capture(*policy).ok());
  const std::vector<int32_t> p1 = testing::prompt_of(6, 11), p2 = testing::prompt_of(3, 12), p3 = {7};
  const std::vector<int32_t> a = testing::prompt_of(4, 13), b = testing::prompt_of(2, 14), c = testing::prompt_of(6, 15);
  const std::vector<ScoredGroup> groups = {{p1, {a, b, c}}, {p2, {c}}, {p3, {b, a}}};
  Result<std::vector<std::vector<std::vector<float>>>> together = ref.score(groups);
  ASSERT_TRUE(together.ok()) << together.status().message();
  ASSERT_EQ(together->size(), 3u);
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::vector<int32_t>> completions;
    for (std::span<const int32_t> c : groups[g].completions) completions.emplace_back(c.begin(), c.end());
    const auto alone = score(ref, std::vector<int32_t>(groups[g].prompt.begin(), groups[g].prompt.end()), completions);
    ASSERT_EQ((*together)[g].size(), alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      expect_near((*together)[g][i], alone[i]);
      expect_near(alone[i], expected(*policy, std::vector<int32_t>(groups[g].prompt.begin(), groups[g].prompt.end()),
                                     completions[i]));
    }
  }
}

TEST(KlReferenceScorer, RefusesBadInputWithoutCrashing) {
  auto backend = testing::cpu_backend();
  auto policy = testing::tiny_model(*backend);
  KlReference ref;
  const std::vector<int32_t> prompt = {1, 2, 3}, completion = {4, 5}, bad = {4, 1 << 20};
  const std::vector<ScoredGroup> one = {{prompt, {completion}}};
  EXPECT_EQ(ref.score(one).status().code(), StatusCode::kUnavailable) << "nothing captured yet";
  ASSERT_TRUE(ref.capture(*policy).ok());
  const std::vector<ScoredGroup> outside = {{prompt, {completion}}, {prompt, {bad, completion}}};
  Result<std::vector<std::vector<std::vector<float>>>> r = ref.score(outside);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  const std::vector<ScoredGroup> no_prompt = {{{}, {completion}}};
  EXPECT_EQ(ref.score(no_prompt).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ref.samples_scored(), 0);
}

}  // namespace
}  // namespace rlrun::rollout
