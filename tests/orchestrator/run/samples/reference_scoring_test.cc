// ReferenceScoring (run/samples/reference_scoring.h): a kept group goes to a rollout worker as one
// ScoreRequest and comes back with each sample's KL reference log-probs; a bad, late or missing
// answer, a failed worker or a slow one gives the group back without them, never loses it.
#include "orchestrator/run/samples/reference_scoring.h"

#include <gtest/gtest.h>

#include <cmath>

namespace rlrun::orchestrator {
namespace {

using Group = Dispatcher::Group;

Group group_of(uint64_t id, std::vector<std::vector<int32_t>> completions) {
  Group g;
  g.id = id;
  g.prompt_ids = {1, 2, 3};
  for (auto& c : completions) {
    Dispatcher::Sample s;
    s.completion = std::move(c);
    g.samples.push_back(std::move(s));
  }
  return g;
}

struct Sent {
  int worker;
  ScoreRequest request;
};

struct Fixture {
  std::vector<Sent> sent;
  ReferenceScoring scoring{[this](int worker, const ScoreRequest& r) {
    sent.push_back({worker, r});
    return Status();
  }};
};

ScoreResult answer(const ScoreRequest& r, float base) {
  ScoreResult out;
  out.request_id = r.request_id;
  std::vector<float> lp;
  for (size_t i = 0; i < r.completion_ids.size(); ++i) lp.push_back(base - 0.1f * static_cast<float>(i));
  out.ref_logprobs = std::move(lp);
  return out;
}

TEST(ReferenceScoring, AGroupGoesOutAsOneRequestAndComesBackScored) {
  Fixture f;
  f.scoring.submit(group_of(7, {{10, 11}, {}, {12, 13, 14}}), 1);
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].worker, 1);
  const ScoreRequest& r = f.sent[0].request;
  EXPECT_EQ(r.prompt_ids.to_vector(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.completion_ids.to_vector(), (std::vector<int32_t>{10, 11, 12, 13, 14}));
  EXPECT_EQ(r.completion_lengths, (std::vector<uint32_t>{2, 0, 3}));
  EXPECT_EQ(f.scoring.waiting(), 1u);

  std::optional<Group> back = f.scoring.on_result(answer(r, -1.0f));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->id, 7u);
  EXPECT_EQ(back->samples[0].ref_logprobs, (std::vector<float>{-1.0f, -1.1f}));
  EXPECT_TRUE(back->samples[1].ref_logprobs.empty());
  ASSERT_EQ(back->samples[2].ref_logprobs.size(), 3u);
  EXPECT_FLOAT_EQ(back->samples[2].ref_logprobs[2], -1.4f);
  EXPECT_EQ(f.scoring.waiting(), 0u);
  EXPECT_EQ(f.scoring.scored(), 1);
  EXPECT_FALSE(f.scoring.on_result(answer(r, -1.0f)).has_value()) << "a repeated answer is ignored";
  ScoreResult stranger = answer(r, -1.0f);
  stranger.request_id = 999;
  EXPECT_FALSE(f.scoring.on_result(stranger).has_value());
}

TEST(ReferenceScoring, ABadAnswerGivesTheGroupBackForTheTrainerToScore) {
  Fixture f;
  for (uint64_t g = 0; g < 3; ++g) f.scoring.submit(group_of(g, {{10, 11}, {12}}), 0);
  ScoreResult error = answer(f.sent[0].request, -1.0f);
  error.ref_logprobs = {};
  error.error = "rollout 0 has no KL reference yet";
  ScoreResult short_answer = answer(f.sent[1].request, -1.0f);
  short_answer.ref_logprobs = std::vector<float>{-1.0f, -1.0f};
  ScoreResult not_finite = answer(f.sent[2].request, -1.0f);
  not_finite.ref_logprobs = std::vector<float>{-1.0f, std::nanf(""), -1.0f};
  for (const ScoreResult* bad : {&error, &short_answer, &not_finite}) {
    std::optional<Group> back = f.scoring.on_result(*bad);
    ASSERT_TRUE(back.has_value());
    for (const auto& s : back->samples) EXPECT_TRUE(s.ref_logprobs.empty());
    EXPECT_NE(f.scoring.last_error(), "");
  }
  EXPECT_EQ(f.scoring.unscored(), 3);
  EXPECT_EQ(f.scoring.scored(), 0);
  EXPECT_EQ(f.scoring.waiting(), 0u);
}

TEST(ReferenceScoring, AFailedOrSlowWorkersGroupsComeBackWithoutScores) {
  Fixture f;
  const auto t0 = ReferenceScoring::Clock::now();
  f.scoring.submit(group_of(1, {{5}}), 0, t0);
  f.scoring.submit(group_of(2, {{6}}), 1, t0);
  f.scoring.submit(group_of(3, {{7}}), 1, t0 + std::chrono::seconds(5));
  std::vector<Group> released = f.scoring.release_worker(1);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(f.scoring.waiting(), 1u);
  EXPECT_TRUE(f.scoring.take_overdue(10.0, t0 + std::chrono::seconds(9)).empty());
  std::vector<Group> late = f.scoring.take_overdue(10.0, t0 + std::chrono::seconds(11));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].id, 1u);
  EXPECT_EQ(f.scoring.waiting(), 0u);
  EXPECT_FALSE(f.scoring.on_result(answer(f.sent[0].request, -1.0f)).has_value()) << "it already left";
  EXPECT_EQ(f.scoring.unscored(), 3);
}

TEST(ReferenceScoring, WhatStillWaitsAtTheEndIsHandedBack) {
  Fixture f;
  f.scoring.submit(group_of(4, {{5}}), 0);
  f.scoring.submit(group_of(5, {{6}}), 0);
  EXPECT_EQ(f.scoring.take_all().size(), 2u);
  EXPECT_EQ(f.scoring.waiting(), 0u);
}

}  // namespace
}  // namespace rlrun::orchestrator
