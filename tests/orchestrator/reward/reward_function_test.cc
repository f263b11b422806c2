#include "orchestrator/reward/reward_function.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rlrun::orchestrator {
namespace {

using ::testing::HasSubstr;

// A test double: reward 0.25 for any completion, and correct only for "right" (so a test can tell
// Task::correct from reward >= 1).
class FakeTask : public Task {
 public:
  std::string name() const override { return "fake"; }
  Problem next_train() override { return {}; }
  const std::vector<Problem>& eval_set() const override { return eval_; }
  double reward(const Problem&, std::string_view completion) const override {
    ++calls;
    return completion == "right" ? 1.0 : 0.25;
  }
  bool correct(const Problem&, std::string_view completion) const override { return completion == "right"; }
  mutable int calls = 0;

 private:
  std::vector<Problem> eval_;
};

struct Fixture {
  FakeTask task;
  TaskSection keys;

  Result<RewardFunction> make(const std::string& reward) {
    keys.reward = reward;
    Result<RewardExpression> expr = parse_reward_expression(reward);
    EXPECT_TRUE(expr.ok()) << expr.status().message();
    if (!expr.ok()) return expr.status();
    return RewardFunction::create(*expr, keys, task);
  }
};

Problem problem(std::string prompt, std::string answer) {
  Problem p;
  p.prompt = std::move(prompt);
  p.answer = std::move(answer);
  return p;
}

Problem gsm8k(const std::string& answer) { return problem("How many?", "They have 3 + 4 = 7.\n#### " + answer); }

double term_value(const LocalReward& r, RewardTerm term) {
  for (const TermValue& t : r.terms)
    if (t.term == term) return t.value;
  ADD_FAILURE() << "no term " << reward_term_name(term);
  return -1;
}

TEST(RewardFunction, TaskTermIsTheTasksReward) {
  Fixture f;
  Result<RewardFunction> fn = f.make("task");
  ASSERT_TRUE(fn.ok()) << fn.status().message();
  const LocalReward r = fn->local(gsm8k("7"), {"anything", 3, 10});
  EXPECT_DOUBLE_EQ(r.total, 0.25);
  ASSERT_EQ(r.terms.size(), 1u);
  EXPECT_EQ(r.terms[0].term, RewardTerm::kTask);
  EXPECT_EQ(f.task.calls, 1);
  EXPECT_FALSE(fn->uses_http());
  EXPECT_EQ(fn->http_weight(), 0.0);
}

TEST(RewardFunction, WeightedSumOfNumericFormatAndLength) {
  Fixture f;
  f.keys.format_regex = "####\\s*-?[0-9]";
  Result<RewardFunction> fn = f.make("2*numeric + 0.1*format - 0.5*length");
  ASSERT_TRUE(fn.ok()) << fn.status().message();
  // Right number, right format, a quarter of max_tokens.
  LocalReward r = fn->local(gsm8k("7"), {"3 + 4 = 7\n#### 7", 25, 100});
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kNumeric), 1.0);
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kFormat), 1.0);
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kLength), 0.25);
  EXPECT_DOUBLE_EQ(r.total, 2.0 + 0.1 - 0.5 * 0.25);
  ASSERT_EQ(r.terms.size(), 3u);  // in the order written, with their weights
  EXPECT_EQ(r.terms[0].term, RewardTerm::kNumeric);
  EXPECT_EQ(r.terms[0].weight, 2.0);
  EXPECT_EQ(r.terms[2].weight, -0.5);
  // Wrong number, no format, longer than max_tokens (clamped to 1).
  r = fn->local(gsm8k("7"), {"it is 8", 120, 100});
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kNumeric), 0.0);
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kFormat), 0.0);
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kLength), 1.0);
  EXPECT_DOUBLE_EQ(r.total, -0.5);
  EXPECT_EQ(f.task.calls, 0);
}

TEST(RewardFunction, ExactAndRegexTerms) {
  Fixture f;
  f.keys.reward_regex = "answer: {answer}$";
  Result<RewardFunction> fn = f.make("exact + 3*regex");
  ASSERT_TRUE(fn.ok()) << fn.status().message();
  const Problem p = problem("Reverse abc", "cba");
  LocalReward r = fn->local(p, {" cba \nso the answer: cba", 5, 10});
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kExact), 1.0);
  EXPECT_DOUBLE_EQ(term_value(r, RewardTerm::kRegex), 1.0);
  EXPECT_DOUBLE_EQ(r.total, 4.0);
  r = fn->local(p, {"abc\nanswer: c.a", 5, 10});
  EXPECT_DOUBLE_EQ(r.total, 0.0);
}

TEST(RewardFunction, HttpTermIsLeftToTheCaller) {
  Fixture f;
  f.keys.reward_url = "http://127.0.0.1:1/";
  Result<RewardFunction> fn = f.make("0.5*http + 0.5*numeric");
  ASSERT_TRUE(fn.ok()) << fn.status().message();
  EXPECT_TRUE(fn->uses_http());
  EXPECT_EQ(fn->http_weight(), 0.5);
  const LocalReward r = fn->local(gsm8k("7"), {"7", 1, 10});
  ASSERT_EQ(r.terms.size(), 1u);
  EXPECT_EQ(r.terms[0].term, RewardTerm::kNumeric);
  EXPECT_DOUBLE_EQ(r.total, 0.5);
}

TEST(RewardFunction, CorrectUsesTheVerifierTerm) {
  Fixture f;
  f.keys.format_regex = "####";
  // numeric is the verifier; format (written first) does not count.
  Result<RewardFunction> numeric = f.make("0.1*format + numeric");
  ASSERT_TRUE(numeric.ok());
  EXPECT_TRUE(numeric->correct(gsm8k("7"), "the answer is 7"));
  EXPECT_FALSE(numeric->correct(gsm8k("7"), "#### 8"));
  // exact
  f.keys.format_regex = "";
  Result<RewardFunction> exact = f.make("exact + numeric");
  ASSERT_TRUE(exact.ok());
  EXPECT_FALSE(exact->correct(gsm8k("7"), "the answer is 7"));
  EXPECT_TRUE(exact->correct(problem("q", "7"), "7\nbecause"));
  // task: Task::correct, not reward >= 1 (FakeTask rewards 0.25 but is correct only for "right").
  Result<RewardFunction> task = f.make("length");
  ASSERT_TRUE(task.ok());
  EXPECT_TRUE(task->correct(gsm8k("7"), "right"));
  EXPECT_FALSE(task->correct(gsm8k("7"), "7"));
  // regex
  f.keys.reward_regex = "= {answer}\\.";
  Result<RewardFunction> regex = f.make("0.2*length + regex");
  ASSERT_TRUE(regex.ok());
  EXPECT_TRUE(regex->correct(problem("q", "42"), "x = 42."));
  EXPECT_FALSE(regex->correct(problem("q", "42"), "x = 42"));
}

// task.accuracy names the check held-out accuracy makes, whatever task.reward says: a reward from
// a server alone still has its accuracy counted by a verifier.
TEST(RewardFunction, AccuracyKeyOverridesTheVerifier) {
  Fixture f;
  f.keys.reward_url = "http://127.0.0.1:1/";
  f.keys.accuracy = "numeric";
  Result<RewardFunction> http = f.make("http");
  ASSERT_TRUE(http.ok()) << http.status().message();
  EXPECT_TRUE(http->correct(gsm8k("7"), "so 7 apples"));
  EXPECT_FALSE(http->correct(gsm8k("7"), "right"));  // not the task's own rule
  f.keys.accuracy = "regex";
  f.keys.reward_regex = "is {answer}$";
  Result<RewardFunction> regex = f.make("http");
  ASSERT_TRUE(regex.ok()) << regex.status().message();
  EXPECT_TRUE(regex->correct(problem("q", "42"), "it is 42"));
  f.keys.accuracy = "length";
  EXPECT_NE(f.make("http").status().message().find("task.accuracy \"length\" is not one of"), std::string::npos);
}

TEST(RewardFunction, ErrorsNameTheKey) {
  Fixture f;
  Result<RewardFunction> fn = f.make("regex");
  ASSERT_FALSE(fn.ok());
  EXPECT_THAT(fn.status().message(), HasSubstr("task.reward_regex"));
  fn = f.make("numeric + format");
  ASSERT_FALSE(fn.ok());
  EXPECT_THAT(fn.status().message(), HasSubstr("task.format_regex"));
  fn = f.make("http");
  ASSERT_FALSE(fn.ok());
  EXPECT_THAT(fn.status().message(), HasSubstr("task.reward_url"));

  f.keys.format_regex = "#{2,1}";
  fn = f.make("format");
  ASSERT_FALSE(fn.ok());
  EXPECT_THAT(fn.status().message(), HasSubstr("task.format_regex \"#{2,1}\""));
  EXPECT_THAT(fn.status().message(), HasSubstr("offset"));
  EXPECT_THAT(fn.status().message(), HasSubstr("numbers out of order"));

  f.keys.reward_regex = "({answer}";
  fn = f.make("regex");
  ASSERT_FALSE(fn.ok());
  EXPECT_THAT(fn.status().message(), HasSubstr("task.reward_regex \"({answer}\""));
  EXPECT_THAT(fn.status().message(), HasSubstr("missing closing parenthesis"));
}

}  // namespace
}  // namespace rlrun::orchestrator
