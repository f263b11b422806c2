// expression.h - exact evaluation of arithmetic expressions from model completions (countdown).
//
// Grammar: expr = term (('+'|'-') term)*; term = factor (('*'|'/') factor)*;
//          factor = integer | '(' expr ')' | '-' factor. Spaces are ignored.
// Arithmetic is on exact rationals (int64 numerator/denominator, overflow detected), so
// 6/4*2 == 3 exactly and no float rounding can award a wrong answer. Untrusted text: any
// malformed input, division by zero, overflow or nesting deeper than 64 is an error, never a crash.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rlrun::orchestrator {

struct Rational {
  int64_t num = 0;
  int64_t den = 1;  // > 0, gcd(num, den) == 1
  bool operator==(const Rational&) const = default;
};

struct ParsedExpression {
  Rational value;
  std::vector<int64_t> literals;  // the integers the expression uses, in order
};

Result<ParsedExpression> evaluate_expression(std::string_view text);

}  // namespace rlrun::orchestrator
