// task.reward's grammar: weighted sums of named terms, and errors that point at the fault.
#include "common/config/reward_expr.h"

#include <gtest/gtest.h>

namespace rlrun {
namespace {

TEST(RewardExpression, ReadsWeightedSumsInOrder) {
  Result<RewardExpression> e = parse_reward_expression(" numeric + 0.1*format - 0.05 * length ");
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(e->terms.size(), 3u);
  EXPECT_EQ(e->terms[0].term, RewardTerm::kNumeric);
  EXPECT_DOUBLE_EQ(e->terms[0].weight, 1.0);
  EXPECT_EQ(e->terms[1].term, RewardTerm::kFormat);
  EXPECT_DOUBLE_EQ(e->terms[1].weight, 0.1);
  EXPECT_EQ(e->terms[2].term, RewardTerm::kLength);
  EXPECT_DOUBLE_EQ(e->terms[2].weight, -0.05);
  EXPECT_EQ(e->verifier(), RewardTerm::kNumeric);
}

TEST(RewardExpression, LeadingMinusAndScientificWeights) {
  Result<RewardExpression> e = parse_reward_expression("-length+2e-1*http");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_DOUBLE_EQ(e->terms[0].weight, -1.0);
  EXPECT_DOUBLE_EQ(e->terms[1].weight, 0.2);
  EXPECT_TRUE(e->has(RewardTerm::kHttp));
  EXPECT_FALSE(e->has(RewardTerm::kExact));
  EXPECT_EQ(e->verifier(), RewardTerm::kTask);  // no verifier written: the task's own rule
}

TEST(RewardExpression, VerifierIsTheFirstCheckingTerm) {
  EXPECT_EQ(parse_reward_expression("0.5*http + regex + exact")->verifier(), RewardTerm::kRegex);
  EXPECT_EQ(parse_reward_expression("task")->verifier(), RewardTerm::kTask);
}

TEST(RewardExpression, ErrorsNameTheFault) {
  const auto message = [](const char* text) { return parse_reward_expression(text).status().message(); };
  EXPECT_NE(message("numerik").find("unknown term `numerik` (the terms: task, exact"), std::string::npos);
  EXPECT_NE(message("numeric + numeric").find("appears twice"), std::string::npos);
  EXPECT_NE(message("0.1 format").find("expected * between a weight and its term"), std::string::npos);
  EXPECT_NE(message("numeric format").find("at character 9: expected + or -"), std::string::npos);
  EXPECT_NE(message("").find("is empty"), std::string::npos);
  EXPECT_NE(message("numeric +").find("expected a term"), std::string::npos);
  EXPECT_FALSE(parse_reward_expression("1e999*numeric").ok());
}

}  // namespace
}  // namespace rlrun
