// PromptAdmission (run/samples/prompt_admission.h): the next prompt that fits becomes a group at
// the version given, its samples counted dispatched; prompts that do not fit are skipped and
// counted, and a stream where none fits stops saying what to change; rows the environment runs
// are admitted as episode groups without a length check; a resume skips what was drawn.
#include "orchestrator/run/samples/prompt_admission.h"

#include <gtest/gtest.h>

#include "tests/orchestrator/run/part_test_util.h"

namespace rlrun::orchestrator {
namespace {

using testing::PartEnv;

struct PromptAdmissionTest : ::testing::Test {
  PartEnv env;
  testing::FixedTask task;
  std::vector<GenerateRequest> requests;
  Dispatcher dispatcher{[this] {
                          DispatchOptions o;
                          o.group_size = 2;
                          o.lanes_per_worker = 100;
                          return o;
                        }(),
                        env.workers, [this](int, const GenerateRequest& r) {
                          requests.push_back(r);
                          return Status();
                        }};
  PromptAdmission make(std::function<bool(const Problem&)> runs = [](const Problem&) { return false; }) {
    return PromptAdmission(env.config, task, env.format, dispatcher, env.ledger, std::move(runs));
  }
};

TEST_F(PromptAdmissionTest, APromptThatFitsBecomesAGroupAtTheVersionGiven) {
  PromptAdmission admission = make();
  const std::optional<PromptAdmission::Admitted> a = admission.admit(7);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->episodes);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(dispatcher.in_flight().at(a->group).dispatch_version, 7u);
  EXPECT_EQ(dispatcher.in_flight().at(a->group).problem.prompt, "p0");
  EXPECT_EQ(env.ledger.summary().dispatched, 2) << "both samples of the group";
  EXPECT_EQ(admission.consumed(), 1u);
  EXPECT_EQ(admission.stats().prompts_skipped, 0);
}

TEST_F(PromptAdmissionTest, PromptsThatDoNotFitAreSkippedAndAStreamWhereNoneFitsStops) {
  env.config.max_prompt_tokens = 0;  // none fits
  PromptAdmission admission = make();
  int turns = 0;
  while (admission.stop_reason().empty() && turns < 100) {
    EXPECT_FALSE(admission.admit(0).has_value());
    ++turns;
  }
  EXPECT_EQ(turns, PromptAdmission::kMaxPromptsSkippedInARow / PromptAdmission::kMaxPromptTries)
      << "each turn tries kMaxPromptTries prompts";
  EXPECT_EQ(admission.stats().prompts_skipped, PromptAdmission::kMaxPromptsSkippedInARow);
  EXPECT_NE(admission.stop_reason().find("raise max_prompt_tokens and max_model_len"), std::string::npos)
      << admission.stop_reason();
  EXPECT_TRUE(requests.empty());
  EXPECT_EQ(env.ledger.summary().dispatched, 0);
}

TEST_F(PromptAdmissionTest, RowsTheEnvironmentRunsAreEpisodeGroupsWithoutALengthCheck) {
  env.config.max_prompt_tokens = 0;
  PromptAdmission admission = make([](const Problem&) { return true; });
  const std::optional<PromptAdmission::Admitted> a = admission.admit(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->episodes);
  EXPECT_TRUE(requests.empty()) << "its episodes make their own requests";
  EXPECT_TRUE(dispatcher.in_flight().at(a->group).episodes);
  EXPECT_EQ(env.ledger.summary().dispatched, 2);
}

TEST_F(PromptAdmissionTest, AResumedRunSkipsWhatTheSavedRunDrew) {
  PromptAdmission admission = make();
  admission.resume_from(5, 2);
  EXPECT_EQ(admission.stats().prompts_skipped, 2);
  const std::optional<PromptAdmission::Admitted> a = admission.admit(0);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(dispatcher.in_flight().at(a->group).problem.prompt, "p5");
  EXPECT_EQ(admission.consumed(), 6u);
  EXPECT_EQ(admission.next_unchecked().problem.prompt, "p6") << "the warm-start's prompts count in the position";
  EXPECT_EQ(admission.consumed(), 7u);
}

}  // namespace
}  // namespace rlrun::orchestrator
