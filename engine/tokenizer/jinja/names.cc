// jinja/names.cc - jinja2's check that every filter and test a template names exists.
#include "engine/tokenizer/jinja/ast.h"

namespace rlrun::engine::jinja {
namespace {

// jinja2 builtins that rlrun's interpreter does not implement: named in their own message.
const char* const kJinjaFiltersMissing[] = {"batch", "center", "filesizeformat", "format", "forceescape",
                                            "groupby", "pprint", "random", "round", "slice", "striptags",
                                            "sum", "truncate", "urlencode", "urlize", "wordcount", "wordwrap",
                                            "xmlattr"};
const char* const kJinjaTestsMissing[] = {"escaped", "filter", "test"};

void check_expr(const Expr* e, bool soft);

void check_body(const Body& body, bool soft) {
  for (const Node& n : body) {
    check_expr(n.expr.get(), soft);
    switch (n.kind) {
      case Node::Kind::kIf:  // jinja2 compiles the tests and branches of an if in a "soft" frame
        for (const auto& [cond, branch] : n.branches) {
          check_expr(cond.get(), true);
          check_body(branch, true);
        }
        check_body(n.else_body, true);
        break;
      case Node::Kind::kFor:  // the loop body and its filter get a frame of their own
        check_expr(n.filter.get(), false);
        check_body(*n.body, false);
        check_body(n.else_body, false);
        break;
      case Node::Kind::kMacro: case Node::Kind::kCallBlock: case Node::Kind::kFilterBlock:
      case Node::Kind::kSetBlock:
        for (const auto& [name, def] : n.params) check_expr(def.get(), soft);
        check_body(*n.body, false);
        break;
      default: break;
    }
  }
}

void check_expr(const Expr* e, bool soft) {
  if (e == nullptr) return;
  if (e->kind == Expr::Kind::kCondition) soft = true;
  const bool filter = e->kind == Expr::Kind::kFilter;
  if ((filter || e->kind == Expr::Kind::kTest) && !soft &&
      !(filter ? is_known_filter(e->name) : is_known_test(e->name))) {
    throw unknown_name_error(e->name, filter, false, e->line);
  }
  for (const auto& a : e->args) check_expr(a.get(), soft);
  for (const auto& [k, v] : e->keywords) check_expr(v.get(), soft);
}

}  // namespace

void check_names(const Body& body) { check_body(body, false); }

TemplateError unknown_name_error(const std::string& name, bool filter, bool at_render, int line) {
  const char* kind = filter ? "filter" : "test";
  if (filter) {
    for (const char* f : kJinjaFiltersMissing) {
      if (name == f) return TemplateError("filter '" + name + "' is not supported by rlrun's chat templates", line);
    }
  } else {
    for (const char* t : kJinjaTestsMissing) {
      if (name == t) return TemplateError("test '" + name + "' is not supported by rlrun's chat templates", line);
    }
  }
  return TemplateError(std::string("No ") + kind + " named '" + name + "'" + (at_render ? " found." : "."), line);
}

}  // namespace rlrun::engine::jinja
