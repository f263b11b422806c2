#include "common/config/reward_expr.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace rlrun {
namespace {

constexpr std::array<std::pair<RewardTerm, std::string_view>, 7> kNames = {{
    {RewardTerm::kTask, "task"},
    {RewardTerm::kExact, "exact"},
    {RewardTerm::kNumeric, "numeric"},
    {RewardTerm::kRegex, "regex"},
    {RewardTerm::kFormat, "format"},
    {RewardTerm::kLength, "length"},
    {RewardTerm::kHttp, "http"},
}};

constexpr std::string_view kAllNames = "task, exact, numeric, regex, format, length, http";

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<RewardExpression> parse() {
    RewardExpression expr;
    skip_space();
    if (pos_ == text_.size()) return error("is empty; write a term such as \"numeric\"");
    double sign = 1;
    if (peek() == '-') sign = -1, ++pos_;
    while (true) {
      RLRUN_ASSIGN_OR_RETURN(WeightedRewardTerm term, parse_term());
      term.weight *= sign;
      if (expr.has(term.term))
        return invalid_argument(str("task.reward \"", text_, "\": the term `", reward_term_name(term.term),
                                    "` appears twice; add its weights into one"));
      expr.terms.push_back(term);
      skip_space();
      if (pos_ == text_.size()) return expr;
      if (peek() != '+' && peek() != '-') return error("expected + or - between terms");
      sign = peek() == '-' ? -1 : 1;
      ++pos_;
    }
  }

 private:
  Result<WeightedRewardTerm> parse_term() {
    skip_space();
    WeightedRewardTerm term;
    if (pos_ < text_.size() && (std::isdigit(static_cast<unsigned char>(peek())) || peek() == '.')) {
      const std::string rest(text_.substr(pos_));
      char* end = nullptr;
      term.weight = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str() || !std::isfinite(term.weight)) return error("expected a number");
      pos_ += static_cast<size_t>(end - rest.c_str());
      skip_space();
      if (peek() != '*') return error("expected * between a weight and its term, as in 0.1*format");
      ++pos_;
      skip_space();
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    const std::string_view name = text_.substr(start, pos_ - start);
    if (name.empty()) return error(str("expected a term (", kAllNames, ")"));
    for (const auto& [t, n] : kNames) {
      if (n == name) {
        term.term = t;
        return term;
      }
    }
    pos_ = start;
    return error(str("unknown term `", name, "` (the terms: ", kAllNames, ")"));
  }

  Status error(std::string_view what) const {
    return invalid_argument(str("task.reward \"", text_, "\"",
                                pos_ < text_.size() ? str(" at character ", pos_ + 1) : std::string(), ": ", what));
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

std::string_view reward_term_name(RewardTerm term) {
  for (const auto& [t, n] : kNames)
    if (t == term) return n;
  return "?";
}

bool RewardExpression::has(RewardTerm term) const {
  for (const WeightedRewardTerm& t : terms)
    if (t.term == term) return true;
  return false;
}

RewardTerm RewardExpression::verifier() const {
  for (const WeightedRewardTerm& t : terms) {
    if (t.term == RewardTerm::kTask || t.term == RewardTerm::kExact || t.term == RewardTerm::kNumeric ||
        t.term == RewardTerm::kRegex)
      return t.term;
  }
  return RewardTerm::kTask;
}

Result<RewardExpression> parse_reward_expression(std::string_view text) { return Parser(text).parse(); }

}  // namespace rlrun
