// jinja/ast.h - the parsed template: expressions and statements, immutable after parse().
// A render walks it; macros defined by a template point into it, so it outlives every render.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/jinja/value.h"

namespace rlrun::engine::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args: elements (tuple: a tuple literal)
    kDict,      // args: key0, value0, key1, value1, ...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]], null for an omitted bound
    kCall,      // args[0](args[1:], keywords)
    kFilter,    // args[0] | name(args[1:], keywords)
    kTest,      // args[0] is [not] name(args[1:]); negated
    kUnary,     // name: "-", "+", "not"; args[0]
    kBinary,    // name: operator, or "and" / "or" / "in" / "not in"; args[0], args[1]
    kCondition, // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  bool tuple = false;
  bool negated = false;
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum class Kind {
    kText,        // text
    kOutput,      // {{ expr }}
    kIf,          // branches: (cond, body)...; else_body
    kFor,         // for targets in expr [if filter]: body else else_body
    kSet,         // set targets = expr; or set targets[0].attr = expr (namespace)
    kSetBlock,    // set targets[0] %}body{% endset
    kMacro,       // macro name(params): body
    kCallBlock,   // call(params) expr: body (the body is `caller`)
    kFilterBlock, // filter expr: body; expr is a kFilter chain on a placeholder kName ""
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  std::string name;
  std::string attr;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro/call parameters and defaults
  std::shared_ptr<Body> body;  // shared: macros keep it while they live
  Body else_body;
};

struct Template {
  Body body;
};

// The builtin filter and test names (jinja/filters.cc, jinja/builtins.cc).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

// jinja2's compile-time check of filter and test names (jinja/names.cc): an unknown name is a
// TemplateError, except inside an `if` (test and branches) or an inline if-expression, where
// jinja2 defers it to the render that reaches it (then: unknown_name_error).
void check_names(const Body& body);
// "No filter named 'x' found." (at render), or that rlrun lacks a filter jinja2 has.
TemplateError unknown_name_error(const std::string& name, bool filter, bool at_render, int line);

// Throws TemplateError naming the line and the construct on a syntax error or an unsupported tag.
std::shared_ptr<const Template> parse_template(const std::string& source);

}  // namespace rlrun::engine::jinja
