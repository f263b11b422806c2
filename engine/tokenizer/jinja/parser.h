// jinja/parser.h - tokens -> AST, following jinja2's Parser (same precedence and statement forms).
// Statements in parser.cc, expressions in expression_parser.cc. Internal to jinja/.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/lexer.h"

namespace rlrun::engine::jinja {

// Deeper nesting (brackets, operators, blocks) than this is refused: the parser recurses, and an
// untrusted template must not overflow the stack.
constexpr int kMaxParseDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_all();

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxParseDepth) {
        throw limit_error("template nested too deeply (more than " + std::to_string(kMaxParseDepth) + " levels)",
                          p->cur().line);
      }
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t k = 1) const { return tokens_[std::min(pos_ + k, tokens_.size() - 1)]; }
  void advance() { if (pos_ + 1 < tokens_.size()) ++pos_; }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().text == name; }
  bool skip_op(const char* op) { if (!is_op(op)) return false; advance(); return true; }
  bool skip_name(const char* name) { if (!is_name(name)) return false; advance(); return true; }

  static std::string describe(const Token& t);
  [[noreturn]] void fail(const std::string& message) const { throw TemplateError(message, cur().line); }
  [[noreturn]] void unexpected(const std::string& wanted) const;
  void expect_op(const char* op) { if (!skip_op(op)) unexpected(std::string("'") + op + "'"); }
  void expect_block_end();
  std::string expect_name();
  static Node node(Node::Kind kind, int line);
  ExprPtr make(Expr::Kind kind, int line);
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line);

  // ---- statements (parser.cc) ----
  // Parses until `{% <one of end_tags>` (left unconsumed, its name in *end) or the end.
  Body parse_body(std::initializer_list<const char*> end_tags, std::string* end);

  // Consumes the tag name of an end tag found by parse_body and the `%}` after it.
  void finish_end_tag();
  Node parse_statement();
  void parse_set(Node* n);
  std::vector<std::string> parse_targets();
  void parse_params(Node* n);

  // ---- expressions (expression_parser.cc) ----
  // Comma-separated expressions: one gives itself, several a tuple.
  ExprPtr parse_tuple(bool with_condexpr);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();

  // Python's chained comparisons: a < b < c is (a < b) and (b < c); b is evaluated twice, which
  // is harmless since expressions have no side effects here.
  ExprPtr parse_compare();
  static ExprPtr clone(const Expr& e);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node, int line);

  // `(` args `)` after a callee, filter or test: positional then keyword arguments.
  void parse_args(Expr* e);
  ExprPtr parse_call(ExprPtr callee);

  // `| filter(args)`, `is [not] test args` and calls, in any order (jinja2's parse_filter_expr).
  ExprPtr parse_filter(ExprPtr node, bool filters_only);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace rlrun::engine::jinja
