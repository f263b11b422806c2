#include "orchestrator/reward/verifiers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace rlrun::orchestrator {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

// ---------------------------------------------------------------- numeric_answer

TEST(NumericAnswer, Gsm8kSolutionGivesTheNumberAfterTheLastMarker) {
  const std::string solution =
      "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
      "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72";
  EXPECT_THAT(numeric_answer(solution), Optional(std::string("72")));
  EXPECT_THAT(numeric_answer("#### 5\nthen more text 9\n#### 1,234.50 dollars"), Optional(std::string("1234.5")));
  EXPECT_THAT(numeric_answer("####-3"), Optional(std::string("-3")));
  EXPECT_THAT(numeric_answer("#### -$1,200"), Optional(std::string("-1200")));
  EXPECT_THAT(numeric_answer("#### $-7"), Optional(std::string("-7")));
  // A Markdown heading is not an answer marker: the last number wins.
  EXPECT_THAT(numeric_answer("#### Step 1\nAdd them: 40 + 2 = 42."), Optional(std::string("42")));
  EXPECT_THAT(numeric_answer("#### 8\n#### Summary\nsee above 9"), Optional(std::string("8")));
}

TEST(NumericAnswer, BoxedTakesTheLastBoxWithBalancedBraces) {
  EXPECT_THAT(numeric_answer("so \\boxed{12} wait, no: \\boxed{13}. 99 more"), Optional(std::string("13")));
  EXPECT_THAT(numeric_answer("\\boxed{\\text{{x}} = 7}"), Optional(std::string("7")));
  EXPECT_THAT(numeric_answer("\\boxed{\\frac{3}{4}}"), Optional(std::string("0.75")));
  EXPECT_THAT(numeric_answer("\\boxed{-5}"), Optional(std::string("-5")));
  EXPECT_THAT(numeric_answer("\\boxed{\\$1,000}"), Optional(std::string("1000")));
  // A box that holds no number is the answer all the same: none.
  EXPECT_EQ(numeric_answer("I computed 4 so \\boxed{\\text{yes}}"), std::nullopt);
  // An unclosed box (a truncated completion) is ignored.
  EXPECT_THAT(numeric_answer("3 then \\boxed{4"), Optional(std::string("4")));
  EXPECT_THAT(numeric_answer("\\boxed{2} and \\boxed{5"), Optional(std::string("5")));
  // "####" wins over a box.
  EXPECT_THAT(numeric_answer("\\boxed{5}\n#### 6"), Optional(std::string("6")));
}

TEST(NumericAnswer, LastNumberWithSignsDecimalsSeparatorsAndFractions) {
  EXPECT_THAT(numeric_answer("The answer is 42."), Optional(std::string("42")));
  EXPECT_THAT(numeric_answer("It costs $1,234,567."), Optional(std::string("1234567")));
  EXPECT_THAT(numeric_answer("temperature: -3.50 degrees"), Optional(std::string("-3.5")));
  EXPECT_THAT(numeric_answer("x = +8"), Optional(std::string("8")));
  EXPECT_THAT(numeric_answer("value \xE2\x88\x92" "4"), Optional(std::string("-4")));  // U+2212
  EXPECT_THAT(numeric_answer("between 3-4"), Optional(std::string("4")));
  EXPECT_THAT(numeric_answer("(-4)"), Optional(std::string("-4")));
  EXPECT_THAT(numeric_answer("it is .5"), Optional(std::string("0.5")));
  EXPECT_THAT(numeric_answer("007"), Optional(std::string("7")));
  EXPECT_THAT(numeric_answer("-0.00"), Optional(std::string("0")));
  EXPECT_THAT(numeric_answer("3.14.15"), Optional(std::string("15")));
  EXPECT_THAT(numeric_answer("50% of it"), Optional(std::string("50")));
  EXPECT_THAT(numeric_answer("3/4 of a cake"), Optional(std::string("0.75")));
  EXPECT_THAT(numeric_answer("8/4"), Optional(std::string("2")));
  EXPECT_THAT(numeric_answer("-1/3"), Optional(std::string("-0.333333333333333")));
  EXPECT_THAT(numeric_answer("5/0"), Optional(std::string("0")));  // not a fraction: 5, then 0
  EXPECT_THAT(numeric_answer("\\frac{9}{0}"), Optional(std::string("0")));
  EXPECT_THAT(numeric_answer("1e5"), Optional(std::string("5")));
  // Separators only in groups of three after a first group of at most three digits.
  EXPECT_THAT(numeric_answer("1,23"), Optional(std::string("23")));
  EXPECT_THAT(numeric_answer("1234,567"), Optional(std::string("567")));
  EXPECT_THAT(numeric_answer("10,20,30"), Optional(std::string("30")));
  EXPECT_THAT(numeric_answer("1,000.25"), Optional(std::string("1000.25")));
}

TEST(NumericAnswer, NoNumberIsNone) {
  EXPECT_EQ(numeric_answer(""), std::nullopt);
  EXPECT_EQ(numeric_answer("I do not know."), std::nullopt);
  EXPECT_EQ(numeric_answer("####"), std::nullopt);
  EXPECT_EQ(numeric_answer("- . $ , /"), std::nullopt);
}

TEST(NumericAnswer, HostileTextsTakeLinearTime) {
  const auto start = std::chrono::steady_clock::now();
  std::string big(10 << 20, 'a');
  big += " 17";
  EXPECT_THAT(numeric_answer(big), Optional(std::string("17")));
  EXPECT_EQ(numeric_answer(std::string(10 << 20, '#')), std::nullopt);
  std::string boxes;
  while (boxes.size() < (4u << 20)) boxes += "\\boxed{";
  EXPECT_EQ(numeric_answer(boxes), std::nullopt);
  std::string separators = "1";
  while (separators.size() < (4u << 20)) separators += ",000";
  EXPECT_EQ(numeric_answer(separators)->size(), 1 + (separators.size() - 1) / 4 * 3);
  // Parts too long for a fraction are two numbers.
  EXPECT_EQ(numeric_answer(std::string(1 << 20, '9') + "/" + std::string(1 << 20, '8'))->substr(0, 3), "888");
  std::string invalid_utf8(1 << 20, '\xff');
  invalid_utf8 += "\xE2\x88";  // a cut U+2212
  invalid_utf8 += "5";
  EXPECT_THAT(numeric_answer(invalid_utf8), Optional(std::string("5")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// ---------------------------------------------------------------- numeric_match, exact_match

TEST(NumericMatch, ComparesAsNumbers) {
  EXPECT_TRUE(numeric_match("so the total is 72.", "Natalia sold ... altogether.\n#### 72"));
  EXPECT_TRUE(numeric_match("\\boxed{1,234}", "1234"));
  EXPECT_TRUE(numeric_match("72.0", "72"));
  EXPECT_TRUE(numeric_match("0.75", "3/4"));
  EXPECT_TRUE(numeric_match("0.3333333", "\\frac{1}{3}"));  // within 1e-6 relative
  EXPECT_FALSE(numeric_match("0.3333", "1/3"));
  EXPECT_FALSE(numeric_match("-72", "72"));
  EXPECT_FALSE(numeric_match("73", "#### 72"));
  EXPECT_FALSE(numeric_match("no idea", "#### 72"));
  EXPECT_FALSE(numeric_match("72", "no reference number"));
  // Integers compare exactly, past double precision too.
  EXPECT_FALSE(numeric_match("1234567", "1234568"));
  EXPECT_TRUE(numeric_match("123456789012345678901234567890", "123,456,789,012,345,678,901,234,567,890"));
  EXPECT_FALSE(numeric_match("123456789012345678901234567890", "123456789012345678901234567891"));
  // Beyond double range there is nothing to compare.
  EXPECT_FALSE(numeric_match(std::string(400, '9') + ".5", std::string(400, '9') + ".5"));
}

TEST(ExactMatch, ComparesFirstLinesTrimmed) {
  EXPECT_TRUE(exact_match("  42 \nbecause", "42"));
  EXPECT_TRUE(exact_match("abc", " abc\t\nother"));
  EXPECT_FALSE(exact_match("42.0", "42"));
  EXPECT_FALSE(exact_match("\n42", "42"));
}

// ---------------------------------------------------------------- RewardRegex

TEST(RewardRegex, MatchesAnywhere) {
  Result<RewardRegex> r = RewardRegex::compile("####\\s*-?[0-9]", "task.format_regex");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->matches("work...\n#### 72"));
  EXPECT_FALSE(r->matches("work...\n72"));
  EXPECT_FALSE(r->matches(""));
  EXPECT_TRUE(r->matches(std::string("\xff\xfe bad utf-8 \xc3 then #### 1")));
}

TEST(RewardRegex, CompileErrorNamesTheKeyTheOffsetAndPcre2sMessage) {
  Result<RewardRegex> r = RewardRegex::compile("([0-9]+", "task.format_regex");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("task.format_regex \"([0-9]+\""));
  EXPECT_THAT(r.status().message(), HasSubstr("offset 7"));
  EXPECT_THAT(r.status().message(), HasSubstr("missing closing parenthesis"));
}

TEST(RewardRegex, WindowsOfStartPositionsFindWhatOneSearchFinds) {
  // Matches at every offset, after multi-byte characters, with lookbehind and anchors: windows
  // of 1, 2, 3 and 64 start positions answer as one unbounded search does.
  const std::vector<std::string> patterns = {"b", "(?<=é)x", "^a", "x$", "\\bword\\b", "(?m)^z", "é+", ""};
  std::vector<std::string> texts = {"", "a", "ab", "éx", "aééx", "x", "a word", "swordfish", "ä\nz", "ééé"};
  for (int pad = 0; pad < 70; pad += 7) texts.push_back(std::string(static_cast<size_t>(pad), '.') + "ééx b word");
  for (const std::string& pattern : patterns) {
    RegexLimits whole;
    whole.window_starts = size_t{1} << 40;
    Result<RewardRegex> reference = RewardRegex::compile(pattern, "test", whole);
    ASSERT_TRUE(reference.ok());
    for (size_t window : {1, 2, 3, 64}) {
      RegexLimits limits;
      limits.window_starts = window;
      Result<RewardRegex> r = RewardRegex::compile(pattern, "test", limits);
      ASSERT_TRUE(r.ok());
      for (const std::string& text : texts)
        EXPECT_EQ(r->matches(text), reference->matches(text))
            << "/" << pattern << "/ window " << window << " on \"" << text << "\"";
    }
  }
}

TEST(RewardRegex, MatchNearTheEndOfALongTextIsFound) {
  Result<RewardRegex> r = RewardRegex::compile("####\\s*-?[0-9]", "task.format_regex");
  ASSERT_TRUE(r.ok());
  std::string text(1 << 20, 'x');
  EXPECT_FALSE(r->matches(text));
  text += "#### 9";
  EXPECT_TRUE(r->matches(text));
}

TEST(RewardRegex, CatastrophicBacktrackingReturnsNoMatchWithoutHanging) {
  const auto start = std::chrono::steady_clock::now();
  // Exponential at one start position: PCRE2's match limit stops it.
  Result<RewardRegex> exponential = RewardRegex::compile("(a|aa)+$", "task.reward_regex");
  ASSERT_TRUE(exponential.ok());
  std::string as(10 << 20, 'a');
  as += '!';
  EXPECT_FALSE(exponential->matches(as));
  Result<RewardRegex> nested = RewardRegex::compile("^(\\w+\\s?)*$", "task.reward_regex");
  ASSERT_TRUE(nested.ok());
  EXPECT_FALSE(nested->matches(as));
  Result<RewardRegex> quadratic = RewardRegex::compile("(?:\\w+\\s)*\\w*[0-9]", "task.reward_regex");
  ASSERT_TRUE(quadratic.ok());
  std::string words;
  while (words.size() < (1u << 20)) words += "lorem ipsum ";
  EXPECT_FALSE(quadratic->matches(words));
  EXPECT_FALSE(quadratic->matches(std::string(10 << 20, 'w')));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(RewardRegex, TimeBudgetStopsAPatternThatIsCheapAtEachStartButQuadraticOverall) {
  // About 200k steps at each of 200k start positions (under the match limit each time): a minute
  // of work, stopped by the budget.
  RegexLimits limits;
  limits.budget = std::chrono::milliseconds(100);
  Result<RewardRegex> quadratic = RewardRegex::compile("(?:\\w+\\s)*\\w*[0-9]", "task.reward_regex", limits);
  ASSERT_TRUE(quadratic.ok());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(quadratic->matches(std::string(200000, 'a')));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  // The same pattern still matches where it should.
  EXPECT_TRUE(quadratic->matches("lorem ipsum 7"));
}

// ---------------------------------------------------------------- AnswerRegex

TEST(AnswerRegex, AnswerIsMatchedLiterally) {
  Result<AnswerRegex> r = AnswerRegex::compile("answer is {answer}\\b");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->matches("so the answer is 72.", "72"));
  EXPECT_FALSE(r->matches("so the answer is 721", "72"));
  EXPECT_TRUE(r->matches("the answer is 1+1", "1+1"));
  EXPECT_FALSE(r->matches("the answer is 11", "1+1"));  // "+" is not a quantifier
  EXPECT_FALSE(r->matches("the answer is axb", "a.b"));
  EXPECT_TRUE(r->matches("the answer is (x) [y] {z} $ ^ | \\ ? * # a b", "(x) [y] {z} $ ^ | \\ ? * # a b"));
  EXPECT_TRUE(r->matches("the answer is été", "été"));
  EXPECT_FALSE(r->matches("the answer is ete", "été"));
}

TEST(AnswerRegex, EscapedAnswerStaysLiteralUnderExtendedMode) {
  Result<AnswerRegex> r = AnswerRegex::compile("(?x) answer: \\s {answer}");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->matches("answer: a b", "a b"));
  EXPECT_FALSE(r->matches("answer: ab", "a b"));
}

TEST(AnswerRegex, TemplateWithoutPlaceholderAndManyAnswers) {
  Result<AnswerRegex> fixed = AnswerRegex::compile("^done");
  ASSERT_TRUE(fixed.ok());
  EXPECT_TRUE(fixed->matches("done.", "whatever"));
  Result<AnswerRegex> r = AnswerRegex::compile("={answer}=");
  ASSERT_TRUE(r.ok());
  // More answers than the cache holds, twice over: evicted patterns compile again.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 3 * static_cast<int>(AnswerRegex::kCacheSize); ++i) {
      const std::string answer = std::to_string(i);
      ASSERT_TRUE(r->matches("x=" + answer + "=y", answer)) << i;
      ASSERT_FALSE(r->matches("x=" + answer + "0=y", answer)) << i;
    }
  }
}

TEST(AnswerRegex, CompileErrorNamesTheKeyAndTheTemplatesOffset) {
  Result<AnswerRegex> r = AnswerRegex::compile("answer is {answer} (unclosed");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("task.reward_regex \"answer is {answer} (unclosed\""));
  EXPECT_THAT(r.status().message(), HasSubstr("offset 28"));
  EXPECT_THAT(r.status().message(), HasSubstr("missing closing parenthesis"));
}

TEST(AnswerRegex, AnswerThatBreaksThePatternIsNoMatch) {
  // The template compiles with a stand-in answer; an empty answer leaves an empty class "[]".
  Result<AnswerRegex> r = AnswerRegex::compile("^[{answer}]$");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->matches("b", "abc"));
  EXPECT_FALSE(r->matches("d", "abc"));
  EXPECT_FALSE(r->matches("]", ""));
}

TEST(RegexEscape, EscapesAsciiPunctuationOnly) {
  EXPECT_EQ(regex_escape("a1.+ é"), "a1\\.\\+\\ é");
  EXPECT_EQ(regex_escape(std::string("a\0b", 3)), "a\\x00b");
}

}  // namespace
}  // namespace rlrun::orchestrator
