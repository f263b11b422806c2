#include "orchestrator/tasks/expression.h"

#include <numeric>

#include "common/observe/log.h"

namespace rlrun::orchestrator {
namespace {

constexpr int kMaxDepth = 64;
constexpr size_t kMaxLength = 512;

Result<Rational> make_rational(__int128 num, __int128 den) {
  if (den == 0) return invalid_argument("division by zero");
  if (den < 0) num = -num, den = -den;
  __int128 a = num < 0 ? -num : num, b = den;
  while (b != 0) {
    __int128 t = a % b;
    a = b;
    b = t;
  }
  if (a > 1) num /= a, den /= a;
  if (num > INT64_MAX || num < -INT64_MAX || den > INT64_MAX) return invalid_argument("number too large");
  return Rational{static_cast<int64_t>(num), static_cast<int64_t>(den)};
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<ParsedExpression> parse() {
    RLRUN_ASSIGN_OR_RETURN(Rational v, expr(0));
    skip_spaces();
    if (pos_ != text_.size()) return error("unexpected `" + std::string(1, text_[pos_]) + "`");
    return ParsedExpression{v, literals_};
  }

 private:
  Status error(const std::string& what) const { return invalid_argument(str(what, " at offset ", pos_)); }
  void skip_spaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool eat(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Result<Rational> expr(int depth) {
    RLRUN_ASSIGN_OR_RETURN(Rational acc, term(depth));
    while (true) {
      if (eat('+')) {
        RLRUN_ASSIGN_OR_RETURN(Rational r, term(depth));
        RLRUN_ASSIGN_OR_RETURN(acc, make_rational((__int128)acc.num * r.den + (__int128)r.num * acc.den,
                                                  (__int128)acc.den * r.den));
      } else if (eat('-')) {
        RLRUN_ASSIGN_OR_RETURN(Rational r, term(depth));
        RLRUN_ASSIGN_OR_RETURN(acc, make_rational((__int128)acc.num * r.den - (__int128)r.num * acc.den,
                                                  (__int128)acc.den * r.den));
      } else {
        return acc;
      }
    }
  }

  Result<Rational> term(int depth) {
    RLRUN_ASSIGN_OR_RETURN(Rational acc, factor(depth));
    while (true) {
      if (eat('*')) {
        RLRUN_ASSIGN_OR_RETURN(Rational r, factor(depth));
        RLRUN_ASSIGN_OR_RETURN(acc, make_rational((__int128)acc.num * r.num, (__int128)acc.den * r.den));
      } else if (eat('/')) {
        RLRUN_ASSIGN_OR_RETURN(Rational r, factor(depth));
        RLRUN_ASSIGN_OR_RETURN(acc, make_rational((__int128)acc.num * r.den, (__int128)acc.den * r.num));
      } else {
        return acc;
      }
    }
  }

  Result<Rational> factor(int depth) {
    if (depth > kMaxDepth) return error("expression nested too deeply");
    if (eat('(')) {
      RLRUN_ASSIGN_OR_RETURN(Rational v, expr(depth + 1));
      if (!eat(')')) return error("missing `)`");
      return v;
    }
    if (eat('-')) {
      RLRUN_ASSIGN_OR_RETURN(Rational v, factor(depth + 1));
      return Rational{-v.num, v.den};
    }
    skip_spaces();
    size_t start = pos_;
    __int128 value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = value * 10 + (text_[pos_] - '0');
      if (value > INT64_MAX) return error("number too large");
      ++pos_;
    }
    if (pos_ == start) return error(pos_ < text_.size() ? "expected a number" : "unexpected end");
    literals_.push_back(static_cast<int64_t>(value));
    return Rational{static_cast<int64_t>(value), 1};
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<int64_t> literals_;
};

}  // namespace

Result<ParsedExpression> evaluate_expression(std::string_view text) {
  if (text.size() > kMaxLength) return invalid_argument(str("expression longer than ", kMaxLength, " characters"));
  return Parser(text).parse();
}

}  // namespace rlrun::orchestrator
