#include "orchestrator/tasks/expression.h"

#include <gtest/gtest.h>

#include <random>

namespace rlrun::orchestrator {
namespace {

Rational eval(const std::string& s) {
  auto r = evaluate_expression(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.status().message();
  return r.ok() ? r->value : Rational{};
}

TEST(Expression, PrecedenceParenthesesAndExactDivision) {
  EXPECT_EQ(eval("1+2*3"), (Rational{7, 1}));
  EXPECT_EQ(eval("(1+2)*3"), (Rational{9, 1}));
  EXPECT_EQ(eval("6/4*2"), (Rational{3, 1}));
  EXPECT_EQ(eval(" 7 / 2 "), (Rational{7, 2}));
  EXPECT_EQ(eval("10-2-3"), (Rational{5, 1}));
  EXPECT_EQ(eval("-3+5"), (Rational{2, 1}));
  EXPECT_EQ(eval("100/(25-5)*4"), (Rational{20, 1}));
}

TEST(Expression, RecordsLiteralsInOrder) {
  auto r = evaluate_expression("(75-25)*2+8");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->literals, (std::vector<int64_t>{75, 25, 2, 8}));
}

TEST(Expression, MalformedInputsAreErrors) {
  for (const char* bad : {"", "1+", "(1+2", "1+2)", "1**2", "abc", "1/0", "2/(1-1)", "99999999999999999999",
                          "3 4", "1+2=3"}) {
    EXPECT_FALSE(evaluate_expression(bad).ok()) << bad;
  }
  EXPECT_FALSE(evaluate_expression(std::string(100, '(') + "1" + std::string(100, ')')).ok());
  EXPECT_FALSE(evaluate_expression("9223372036854775807*9223372036854775807").ok());
}

TEST(Expression, RandomBytesNeverCrash) {
  std::mt19937 rng(5);
  const std::string alphabet = "0123456789+-*/() x";
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 30, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    ok += evaluate_expression(s).ok();
  }
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace rlrun::orchestrator
