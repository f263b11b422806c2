// jinja/parser.cc - tokens -> AST, following jinja2's Parser (same precedence and statement forms).
#include <algorithm>
#include <initializer_list>

#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/lexer.h"

namespace rlrun::engine::jinja {
namespace {

// Deeper nesting (brackets, operators, blocks) than this is refused: the parser recurses, and an
// untrusted template must not overflow the stack.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) throw limit_error("template nested too deeply (more than " + std::to_string(kMaxDepth) + " levels)", p->cur().line);
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

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kText: return "template text";
      case TokenType::kVarBegin: return "'{{'";
      case TokenType::kVarEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kString: return "string";
      case TokenType::kInteger: case TokenType::kFloat: return "number " + t.text;
      case TokenType::kEnd: return "end of template";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void fail(const std::string& message) const { throw TemplateError(message, cur().line); }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    fail("unexpected " + describe(cur()) + (wanted.empty() ? "" : ", expected " + wanted));
  }
  void expect_op(const char* op) { if (!skip_op(op)) unexpected(std::string("'") + op + "'"); }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) unexpected("end of statement block");
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) unexpected("a name");
    std::string n = cur().text;
    advance();
    return n;
  }

  static Node node(Node::Kind kind, int line) {
    Node n;
    n.kind = kind;
    n.line = line;
    return n;
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // ---- statements ----

  // Parses until `{% <one of end_tags>` (left unconsumed, its name in *end) or the end.
  Body parse_body(std::initializer_list<const char*> end_tags, std::string* end) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEnd) {
        if (end_tags.size() == 0) return body;
        std::string wanted;
        for (const char* tag : end_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(tag) + "'";
        fail("unexpected end of template, expected " + wanted);
      }
      if (t.type == TokenType::kText) {
        Node n = node(Node::Kind::kText, t.line);
        n.text = t.text;
        body.push_back(std::move(n));
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        Node n = node(Node::Kind::kOutput, t.line);
        advance();
        n.expr = parse_tuple(true);
        if (cur().type != TokenType::kVarEnd) unexpected("end of print statement");
        advance();
        body.push_back(std::move(n));
      } else if (t.type == TokenType::kBlockBegin) {
        const Token& tag = peek();
        for (const char* e : end_tags) {
          if (tag.type == TokenType::kName && tag.text == e) {
            advance();  // to the tag name
            *end = e;
            return body;
          }
        }
        advance();
        body.push_back(parse_statement());
      } else {
        unexpected("");
      }
    }
  }

  // Consumes the tag name of an end tag found by parse_body and the `%}` after it.
  void finish_end_tag() {
    advance();
    expect_block_end();
  }

  Node parse_statement() {
    if (cur().type != TokenType::kName) unexpected("a statement name");
    const std::string tag = cur().text;
    const int line = cur().line;
    advance();
    Node n = node(Node::Kind::kText, line);
    std::string end;
    if (tag == "for") {
      n.kind = Node::Kind::kFor;
      n.targets = parse_targets();
      if (!skip_name("in")) unexpected("'in'");
      n.expr = parse_tuple(false);
      if (skip_name("if")) n.filter = parse_expression(true);
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      n.body = std::make_shared<Body>(parse_body({"endfor", "else"}, &end));
      if (end == "else") {
        finish_end_tag();
        n.else_body = parse_body({"endfor"}, &end);
      }
      finish_end_tag();
    } else if (tag == "if") {
      n.kind = Node::Kind::kIf;
      ExprPtr cond = parse_tuple(false);
      while (true) {
        expect_block_end();
        Body body = parse_body({"elif", "else", "endif"}, &end);
        n.branches.emplace_back(std::move(cond), std::move(body));
        if (end == "elif") { advance(); cond = parse_tuple(false); continue; }
        if (end == "else") {
          finish_end_tag();
          n.else_body = parse_body({"endif"}, &end);
        }
        finish_end_tag();
        break;
      }
    } else if (tag == "set") {
      parse_set(&n);
    } else if (tag == "macro") {
      n.kind = Node::Kind::kMacro;
      n.name = expect_name();
      parse_params(&n);
      expect_block_end();
      n.body = std::make_shared<Body>(parse_body({"endmacro"}, &end));
      finish_end_tag();
    } else if (tag == "call") {
      n.kind = Node::Kind::kCallBlock;
      if (is_op("(")) parse_params(&n);
      n.expr = parse_expression(true);
      if (n.expr->kind != Expr::Kind::kCall) fail("expected a call after {% call %}");
      expect_block_end();
      n.body = std::make_shared<Body>(parse_body({"endcall"}, &end));
      finish_end_tag();
    } else if (tag == "filter") {
      n.kind = Node::Kind::kFilterBlock;
      // `{% filter upper | trim %}`: the first filter comes without its `|`
      auto first = make(Expr::Kind::kFilter, line);
      first->name = expect_name();
      first->args.push_back(make(Expr::Kind::kName, line));  // the placeholder for the body's text
      if (is_op("(")) parse_args(first.get());
      n.expr = parse_filter(std::move(first), true);
      expect_block_end();
      n.body = std::make_shared<Body>(parse_body({"endfilter"}, &end));
      finish_end_tag();
    } else if (tag == "generation") {  // HF's AssistantTracker: renders its body unchanged
      n.kind = Node::Kind::kIf;
      auto always = make(Expr::Kind::kLiteral, line);
      always->value = Value(true);
      expect_block_end();
      n.branches.emplace_back(std::move(always), parse_body({"endgeneration"}, &end));
      finish_end_tag();
    } else if (tag == "break" || tag == "continue") {
      n.kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end();
    } else if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif") {
      throw TemplateError("unexpected '" + tag + "' tag: no block to close", line);
    } else {
      throw TemplateError("unsupported template tag '" + tag + "'", line);
    }
    return n;
  }

  void parse_set(Node* n) {
    n->kind = Node::Kind::kSet;
    std::string first = expect_name();
    if (skip_op(".")) {
      n->attr = expect_name();
      n->targets = {first};
    } else {
      n->targets = {first};
      while (skip_op(",")) n->targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      n->expr = parse_tuple(true);
      expect_block_end();
      return;
    }
    if (!n->attr.empty() || n->targets.size() != 1) unexpected("'='");
    if (is_op("|")) fail("filtered block set is not supported");
    expect_block_end();
    n->kind = Node::Kind::kSetBlock;
    std::string end;
    n->body = std::make_shared<Body>(parse_body({"endset"}, &end));
    finish_end_tag();
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    names.push_back(expect_name());
    while (skip_op(",")) {
      if (cur().type != TokenType::kName || is_name("in")) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  void parse_params(Node* n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression(true);
      n->params.emplace_back(std::move(name), std::move(def));
    }
    advance();
  }

  // ---- expressions ----

  // Comma-separated expressions: one gives itself, several a tuple.
  ExprPtr parse_tuple(bool with_condexpr) {
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

  ExprPtr parse_expression(bool with_condexpr) {
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

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      advance();
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      advance();
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
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
  ExprPtr parse_compare() {
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

  static ExprPtr clone(const Expr& e) {
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      left = binary(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      advance();
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      advance();
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      advance();
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node, int line) {
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
  void parse_args(Expr* e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, cur().line);
    e->args.push_back(std::move(callee));
    parse_args(e.get());
    return e;
  }

  // `| filter(args)`, `is [not] test args` and calls, in any order (jinja2's parse_filter_expr).
  ExprPtr parse_filter(ExprPtr node, bool filters_only) {
    while (true) {
      const int line = cur().line;
      if (skip_op("|")) {
        auto e = make(Expr::Kind::kFilter, line);
        e->name = expect_name();
        while (skip_op(".")) e->name += "." + expect_name();
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

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Template> parse_template(const std::string& source) {
  auto t = std::make_shared<Template>();
  t->body = Parser(lex(source)).parse_all();
  check_names(t->body);
  return t;
}

}  // namespace rlrun::engine::jinja
