// jinja/parser.cc - statements: text, {{ }}, and the {% %} tags (for, if, set, macro, call,
// filter, generation, break, continue); expressions in expression_parser.cc.
#include "engine/tokenizer/jinja/parser.h"

#include <algorithm>

namespace rlrun::engine::jinja {

Body Parser::parse_all() {
  std::string end;
  Body body = parse_body({}, &end);
  return body;
}

std::string Parser::describe(const Token& t) {
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

[[noreturn]] void Parser::unexpected(const std::string& wanted) const {
  fail("unexpected " + describe(cur()) + (wanted.empty() ? "" : ", expected " + wanted));
}

void Parser::expect_block_end() {
  if (cur().type != TokenType::kBlockEnd) unexpected("end of statement block");
  advance();
}

std::string Parser::expect_name() {
  if (cur().type != TokenType::kName) unexpected("a name");
  std::string n = cur().text;
  advance();
  return n;
}

Node Parser::node(Node::Kind kind, int line) {
  Node n;
  n.kind = kind;
  n.line = line;
  return n;
}

ExprPtr Parser::make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr Parser::binary(std::string op, ExprPtr a, ExprPtr b, int line) {
  auto e = make(Expr::Kind::kBinary, line);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

// Parses until `{% <one of end_tags>` (left unconsumed, its name in *end) or the end.
Body Parser::parse_body(std::initializer_list<const char*> end_tags, std::string* end) {
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
void Parser::finish_end_tag() {
  advance();
  expect_block_end();
}

Node Parser::parse_statement() {
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

void Parser::parse_set(Node* n) {
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

std::vector<std::string> Parser::parse_targets() {
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

void Parser::parse_params(Node* n) {
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
std::shared_ptr<const Template> parse_template(const std::string& source) {
  auto t = std::make_shared<Template>();
  t->body = Parser(lex(source)).parse_all();
  check_names(t->body);
  return t;
}

}  // namespace rlrun::engine::jinja
