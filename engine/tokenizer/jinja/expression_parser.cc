// jinja/expression_parser.cc - expressions, by jinja2's precedence: conditional, or, and, not,
// comparisons, + -, ~, * / // %, **, unary, then postfix (.attr, [item], call) and filters/tests.
#include "engine/tokenizer/jinja/parser.h"

namespace rlrun::engine::jinja {

// Comma-separated expressions: one gives itself, several a tuple.
ExprPtr Parser::parse_tuple(bool with_condexpr) {
  const int line = cur().line;
  ExprPtr first = parse_expression(with_condexpr);
  if (!is_op(",")) return first;
  auto t = make(Expr::Kind::kList, line);
  t->tuple = true;
  t->args.push_back(std::move(first));
  while (skip_op(",")) {
    if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || is_op(")")) break;
    t->args.push_back(parse_expression(with_condexpr));
  }
  return t;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(this);
  if (!with_condexpr) return parse_or();
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    const int line = cur().line;
    advance();
    auto c = make(Expr::Kind::kCondition, line);
    c->args.push_back(parse_or());
    c->args.push_back(std::move(expr));
    c->args.push_back(skip_name("else") ? parse_expression(true) : nullptr);
    expr = std::move(c);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    int line = cur().line;
    advance();
    left = binary("or", std::move(left), parse_and(), line);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    int line = cur().line;
    advance();
    left = binary("and", std::move(left), parse_not(), line);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(this);
    auto e = make(Expr::Kind::kUnary, cur().line);
    advance();
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

// Python's chained comparisons: a < b < c is (a < b) and (b < c); b is evaluated twice, which
// is harmless since expressions have no side effects here.
ExprPtr Parser::parse_compare() {
  ExprPtr operand = parse_math1();
  ExprPtr result;  // null until the first comparison
  while (true) {
    const int line = cur().line;
    std::string op;
    if (cur().type == TokenType::kOperator &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
         cur().text == "<=" || cur().text == ">=")) {
      op = cur().text;
      advance();
    } else if (is_name("in")) {
      op = "in";
      advance();
    } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
      op = "not in";
      advance();
      advance();
    } else {
      break;
    }
    ExprPtr right = parse_math1();
    ExprPtr cmp = binary(op, std::move(operand), clone(*right), line);
    result = result ? binary("and", std::move(result), std::move(cmp), line) : std::move(cmp);
    operand = std::move(right);
  }
  return result ? std::move(result) : std::move(operand);
}

ExprPtr Parser::clone(const Expr& e) {
  auto c = std::make_unique<Expr>();
  c->kind = e.kind;
  c->line = e.line;
  c->value = e.value;
  c->name = e.name;
  c->tuple = e.tuple;
  c->negated = e.negated;
  for (const auto& a : e.args) c->args.push_back(a ? clone(*a) : nullptr);
  for (const auto& [k, v] : e.keywords) c->keywords.emplace_back(k, clone(*v));
  return c;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    int line = cur().line;
    advance();
    left = binary(op, std::move(left), parse_concat(), line);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    int line = cur().line;
    advance();
    left = binary("~", std::move(left), parse_math2(), line);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    int line = cur().line;
    advance();
    left = binary(op, std::move(left), parse_pow(), line);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    int line = cur().line;
    advance();
    left = binary("**", std::move(left), parse_unary(true), line);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make(Expr::Kind::kUnary, cur().line);
    node->name = cur().text;
    advance();
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter(std::move(node), false);
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  const int line = t.line;
  if (t.type == TokenType::kName) {
    auto e = make(Expr::Kind::kLiteral, line);
    if (t.text == "true" || t.text == "True") e->value = Value(true);
    else if (t.text == "false" || t.text == "False") e->value = Value(false);
    else if (t.text == "none" || t.text == "None") e->value = Value::none();
    else { e->kind = Expr::Kind::kName; e->name = t.text; }
    advance();
    return e;
  }
  if (t.type == TokenType::kString) {
    std::string s;
    while (cur().type == TokenType::kString) { s += cur().text; advance(); }
    auto e = make(Expr::Kind::kLiteral, line);
    e->value = Value(std::move(s));
    return e;
  }
  if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
    auto e = make(Expr::Kind::kLiteral, line);
    e->value = t.type == TokenType::kInteger ? Value(t.integer) : Value(t.real);
    advance();
    return e;
  }
  if (skip_op("(")) {
    if (skip_op(")")) {
      auto e = make(Expr::Kind::kList, line);
      e->tuple = true;
      return e;
    }
    ExprPtr inner = parse_tuple(true);
    expect_op(")");
    return inner;
  }
  if (skip_op("[")) {
    auto e = make(Expr::Kind::kList, line);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    advance();
    return e;
  }
  if (skip_op("{")) {
    auto e = make(Expr::Kind::kDict, line);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    advance();
    return e;
  }
  unexpected("an expression");
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    const int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == TokenType::kInteger) {
        auto e = make(Expr::Kind::kItem, line);
        auto index = make(Expr::Kind::kLiteral, line);
        index->value = Value(cur().integer);
        advance();
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(index));
        node = std::move(e);
        continue;
      }
      auto e = make(Expr::Kind::kAttr, line);
      e->name = expect_name();
      e->args.push_back(std::move(node));
      node = std::move(e);
    } else if (skip_op("[")) {
      node = parse_subscript(std::move(node), line);
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node, int line) {
  ExprPtr parts[3];
  int colons = 0;
  while (!is_op("]")) {
    if (skip_op(":")) {
      if (++colons > 2) unexpected("']'");
      continue;
    }
    if (parts[colons]) unexpected("':' or ']'");
    parts[colons] = parse_expression(true);
  }
  advance();
  if (colons == 0) {
    if (!parts[0]) fail("empty subscript");
    auto e = make(Expr::Kind::kItem, line);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(parts[0]));
    return e;
  }
  auto e = make(Expr::Kind::kSlice, line);
  e->args.push_back(std::move(node));
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

// `(` args `)` after a callee, filter or test: positional then keyword arguments.
void Parser::parse_args(Expr* e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
      std::string key = cur().text;
      advance();
      advance();
      e->keywords.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e->keywords.empty()) fail("positional argument after keyword argument");
      e->args.push_back(parse_expression(true));
    }
  }
  advance();
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = make(Expr::Kind::kCall, cur().line);
  e->args.push_back(std::move(callee));
  parse_args(e.get());
  return e;
}

// `| filter(args)`, `is [not] test args` and calls, in any order (jinja2's parse_filter_expr).
ExprPtr Parser::parse_filter(ExprPtr node, bool filters_only) {
  while (true) {
    const int line = cur().line;
    if (skip_op("|")) {
      auto e = make(Expr::Kind::kFilter, line);
      e->name = expect_name();
      while (skip_op(".")) {
        e->name += '.';
        e->name += expect_name();
      }
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_args(e.get());
      node = std::move(e);
    } else if (!filters_only && is_name("is")) {
      advance();
      auto e = make(Expr::Kind::kTest, line);
      e->negated = skip_name("not");
      e->name = expect_name();
      e->args.push_back(std::move(node));
      if (is_op("(")) {
        parse_args(e.get());
      } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString ||
                  cur().type == TokenType::kInteger || cur().type == TokenType::kFloat || is_op("[") ||
                  is_op("{") || is_op("(")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("you cannot chain multiple tests with is");
        e->args.push_back(parse_postfix(parse_primary()));
      }
      node = std::move(e);
    } else if (!filters_only && is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}
}  // namespace rlrun::engine::jinja
