// jinja/interpreter.cc - statements and expressions; operators in operators.cc, filters, tests,
// globals and methods in builtins.cc.
#include "engine/tokenizer/jinja/interpreter.h"

#include "engine/tokenizer/jinja/text.h"

namespace rlrun::engine::jinja {

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    if (const Value* v = s->vars.find_str(name)) return v;
  }
  return nullptr;
}

Interpreter::Interpreter(const Limits& limits, std::function<std::tm()> now)
    : limits_(limits), now_(std::move(now)) {}

std::string Interpreter::render(const Template& tmpl, const Dict& globals) {
  auto root = std::make_shared<Scope>(nullptr);
  add_builtin_globals(this, &root->vars);
  for (const auto& [k, v] : globals.items) root->vars.set(k, v);
  scope_ = std::make_shared<Scope>(root);  // the template's own `set`s shadow the globals
  iterations_ = 0;
  call_depth_ = 0;
  std::string out;
  try {
    exec_body(tmpl.body, &out);
  } catch (...) {
    release_cycles();
    throw;
  }
  release_cycles();
  return out;
}

void Interpreter::release_cycles() {
  scope_.reset();
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->items.clear();
  }
  for (auto& weak : macro_scopes_) {
    if (auto scope = weak.lock()) scope->vars.items.clear();
  }
  namespaces_.clear();
  macro_scopes_.clear();
}

void Interpreter::count_iterations(int64_t n, int line) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations) {
    throw limit_error("the template ran more than " + std::to_string(limits_.max_loop_iterations) +
                        " loop iterations (a runaway template?)", line);
  }
}

void Interpreter::check_string(size_t bytes, int line) const {
  if (bytes > limits_.max_output_bytes) {
    throw limit_error("the template built a string over " + std::to_string(limits_.max_output_bytes) +
                        " bytes (a runaway template?)", line);
  }
}

void Interpreter::check_list(size_t items, int line) const {
  if (items > limits_.max_list_items) {
    throw limit_error("the template built a list over " + std::to_string(limits_.max_list_items) +
                        " items (a runaway template?)", line);
  }
}

void Interpreter::emit(std::string_view text, std::string* out, int line) const {
  check_string(out->size() + text.size(), line);
  out->append(text);
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string* out) {
  for (const Node& n : body) {
    Flow f = exec(n, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Node& n, std::string* out) {
  try {
    switch (n.kind) {
      case Node::Kind::kText: emit(n.text, out, n.line); return Flow::kNormal;
      case Node::Kind::kOutput: emit(to_str(eval(*n.expr)), out, n.line); return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (truthy(eval(*cond))) return exec_body(body, out);
        }
        return exec_body(n.else_body, out);
      case Node::Kind::kFor: exec_for(n, out); return Flow::kNormal;
      case Node::Kind::kSet: exec_set(n); return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        std::string captured;
        exec_body(*n.body, &captured);
        scope_->vars.set(n.targets[0], Value(std::move(captured)));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro: scope_->vars.set(n.name, make_macro(n, scope_)); return Flow::kNormal;
      case Node::Kind::kCallBlock: {
        Node caller;  // the body as a macro named `caller`, passed to the called macro
        caller.kind = Node::Kind::kMacro;
        caller.name = "caller";
        caller.line = n.line;
        caller.body = n.body;
        for (const auto& [name, def] : n.params) caller.params.emplace_back(name, nullptr);
        Value caller_fn = make_macro(caller, scope_);
        Value callee = eval(*n.expr->args[0]);
        CallArgs args = eval_args(*n.expr, 1);
        args.keyword.emplace_back("caller", caller_fn);
        emit(to_str(call(callee, args, n.line)), out, n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kFilterBlock: {
        std::string captured;
        exec_body(*n.body, &captured);
        auto saved = scope_;
        scope_ = std::make_shared<Scope>(saved);
        scope_->vars.set("", Value(std::move(captured)));  // the placeholder the filter chain reads
        Value result = eval(*n.expr);
        scope_ = saved;
        emit(to_str(result), out, n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
    }
  } catch (TemplateError& e) {
    if (e.line == 0) e.line = n.line;
    throw;
  }
  return Flow::kNormal;
}

namespace {

Value loop_info(const List& items, size_t i, const Value& cycle) {
  auto d = std::make_shared<Dict>();
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  d->items = {{"index", Value(k + 1)}, {"index0", Value(k)}, {"revindex", Value(n - k)},
              {"revindex0", Value(n - k - 1)}, {"first", Value(k == 0)}, {"last", Value(k == n - 1)},
              {"length", Value(n)}, {"depth", Value(1)}, {"depth0", Value(0)},
              {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
              {"nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined("there is no next item")},
              {"cycle", cycle}};
  return Value(std::move(d));
}

}  // namespace

void Interpreter::exec_for(const Node& n, std::string* out) {
  List all = iterate(eval(*n.expr), n.line);
  auto saved = scope_;
  scope_ = std::make_shared<Scope>(saved);
  auto bind = [&](const Value& item) {
    if (n.targets.size() == 1) { scope_->vars.set(n.targets[0], item); return; }
    List parts = iterate(item, n.line);
    if (parts.size() != n.targets.size()) {
      throw TemplateError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                          std::to_string(n.targets.size()) + " loop variables", n.line);
    }
    for (size_t t = 0; t < parts.size(); ++t) scope_->vars.set(n.targets[t], parts[t]);
  };
  List items;
  if (n.filter) {  // `for x in xs if cond`: loop.* count only the items that pass
    for (const Value& item : all) {
      count_iterations(1, n.line);
      scope_ = std::make_shared<Scope>(saved);
      bind(item);
      if (truthy(eval(*n.filter))) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  auto index = std::make_shared<size_t>(0);
  auto cycle = std::make_shared<Function>(Function{"loop.cycle", [index, n_line = n.line](const CallArgs& a) {
    if (a.positional.empty()) throw TemplateError("no items for cycling given", n_line);
    return a.positional[*index % a.positional.size()];
  }});
  for (size_t i = 0; i < items.size(); ++i) {
    count_iterations(1, n.line);
    *index = i;
    scope_ = std::make_shared<Scope>(saved);  // like jinja2, a `set` in the body lasts one iteration
    bind(items[i]);
    scope_->vars.set("loop", loop_info(items, i, Value(cycle)));
    if (exec_body(*n.body, out) == Flow::kBreak) break;
  }
  scope_ = saved;
  if (items.empty()) exec_body(n.else_body, out);
}

void Interpreter::exec_set(const Node& n) {
  Value v = eval(*n.expr);
  if (!n.attr.empty()) {
    Value ns = lookup(n.targets[0]);
    if (ns.kind != Value::Kind::kNamespace) {
      throw TemplateError("cannot assign attribute on non-namespace object '" + n.targets[0] + "'", n.line);
    }
    ns.dict->set(n.attr, std::move(v));
    return;
  }
  if (n.targets.size() == 1) { scope_->vars.set(n.targets[0], std::move(v)); return; }
  List parts = iterate(v, n.line);
  if (parts.size() != n.targets.size()) {
    throw TemplateError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                        std::to_string(n.targets.size()) + " variables", n.line);
  }
  for (size_t t = 0; t < parts.size(); ++t) scope_->vars.set(n.targets[t], parts[t]);
}

// A macro is a Function that renders its body in a fresh scope over the one it was defined in.
// The body is shared with the Template (n.body), which outlives every render.
Value Interpreter::make_macro(const Node& n, std::shared_ptr<Scope> defining_scope) {
  macro_scopes_.push_back(defining_scope);
  auto body = n.body;
  const Node* node = &n;
  std::vector<std::string> names;
  for (const auto& [name, def] : n.params) names.push_back(name);
  const std::string macro_name = n.name;
  const int line = n.line;
  // Default expressions live in the Template's AST (stable); the caller node may be a temporary,
  // so only kMacro nodes from the AST keep a pointer to their defaults.
  const bool has_defaults = n.name != "caller";
  return Value(std::make_shared<Function>(Function{
      "macro " + macro_name, [this, body, node, names, macro_name, line, has_defaults, defining_scope](
                                 const CallArgs& args) {
        if (++call_depth_ > limits_.max_call_depth) {
          --call_depth_;
          throw limit_error("macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                              " (runaway recursion?)", line);
        }
        auto saved = scope_;
        scope_ = std::make_shared<Scope>(defining_scope);
        if (args.positional.size() > names.size()) {
          scope_ = saved;
          --call_depth_;
          throw TemplateError("macro '" + macro_name + "' takes not more than " + std::to_string(names.size()) +
                              " argument(s)", line);
        }
        for (size_t i = 0; i < names.size(); ++i) {
          const Value* kw = nullptr;
          for (const auto& [k, v] : args.keyword) {
            if (k == names[i]) kw = &v;
          }
          if (i < args.positional.size()) scope_->vars.set(names[i], args.positional[i]);
          else if (kw) scope_->vars.set(names[i], *kw);
          else if (has_defaults && node->params[i].second) scope_->vars.set(names[i], eval(*node->params[i].second));
          else scope_->vars.set(names[i], Value::undefined("parameter '" + names[i] + "' was not provided"));
        }
        for (const auto& [k, v] : args.keyword) {
          if (k == "caller") { scope_->vars.set(k, v); continue; }
          bool known = false;
          for (const auto& name : names) known = known || name == k;
          if (!known) {
            scope_ = saved;
            --call_depth_;
            throw TemplateError("macro '" + macro_name + "' takes no keyword argument '" + k + "'", line);
          }
        }
        std::string out;
        try {
          exec_body(*body, &out);
        } catch (...) {
          scope_ = saved;
          --call_depth_;
          throw;
        }
        scope_ = saved;
        --call_depth_;
        return Value(std::move(out));
      }}));
}

Value Interpreter::lookup(const std::string& name) const {
  if (const Value* v = scope_->find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, v] : e.keywords) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Interpreter::call(const Value& callee, const CallArgs& args, int line) {
  if (callee.is_undefined()) throw TemplateError(callee.str.empty() ? "undefined value called" : callee.str, line);
  if (!callee.is_function()) throw TemplateError("'" + type_name(callee) + "' object is not callable", line);
  return callee.function->call(args);
}

Value Interpreter::eval(const Expr& e) {
  try {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kList: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        return Value(std::move(items), e.tuple);
      }
      case Expr::Kind::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          if (!hashable(k)) throw TemplateError("unhashable type: '" + type_name(k) + "'", e.line);
          d->set(k, eval(*e.args[i + 1]));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::kAttr: return get_attr(eval(*e.args[0]), e.name, e.line);
      case Expr::Kind::kItem: return get_item(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::Kind::kSlice: {
        auto bound = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
        return slice(eval(*e.args[0]), bound(1), bound(2), bound(3), e.line);
      }
      case Expr::Kind::kCall: return eval_call(e);
      case Expr::Kind::kFilter: return apply_filter(e.name, eval(*e.args[0]), eval_args(e, 1), e.line);
      case Expr::Kind::kTest: {
        bool r = apply_test(e.name, eval(*e.args[0]), eval_args(e, 1), e.line);
        return Value(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value(!truthy(v));
        if (v.kind == Value::Kind::kFloat) return Value(e.name == "-" ? -v.real : v.real);
        if (v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool) {
          int64_t i = v.kind == Value::Kind::kBool ? v.boolean : v.integer;
          if (e.name == "-" && i == INT64_MIN) throw TemplateError("integer overflow", e.line);
          return Value(e.name == "-" ? -i : i);
        }
        throw TemplateError("bad operand type for unary " + e.name + ": '" + type_name(v) + "'", e.line);
      }
      case Expr::Kind::kBinary: return eval_binary(e);
      case Expr::Kind::kCondition:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if-expression evaluated to false");
    }
  } catch (TemplateError& err) {
    if (err.line == 0) err.line = e.line;
    throw;
  }
  return Value();
}

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  Value a = eval(*e.args[0]);
  if (op == "and") return truthy(a) ? eval(*e.args[1]) : a;  // Python returns an operand
  if (op == "or") return truthy(a) ? a : eval(*e.args[1]);
  Value b = eval(*e.args[1]);
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));
  if (op == "==") return Value(equals(a, b));
  if (op == "!=") return Value(!equals(a, b));
  if (op == "<") return Value(less(a, b));
  if (op == ">") return Value(less(b, a));
  if (op == "<=") return Value(less(a, b) || equals(a, b));
  if (op == ">=") return Value(less(b, a) || equals(a, b));
  return binary_op(op, a, b, *this, e.line);
}

Value Interpreter::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  // obj.method(...): str and dict methods are looked up without making them first-class values.
  Value fn = eval(callee);
  return call(fn, eval_args(e, 1), e.line);
}

Value Interpreter::get_attr(const Value& object, const std::string& name, int line) {
  switch (object.kind) {
    case Value::Kind::kUndefined:
      throw TemplateError(object.str.empty() ? "attribute '" + name + "' of an undefined value" : object.str, line);
    case Value::Kind::kDict: {
      Value method = bound_method(this, object, name);
      if (!method.is_undefined()) return method;
      if (const Value* v = object.dict->find_str(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::kNamespace:
      if (const Value* v = object.dict->find_str(name)) return *v;
      return Value::undefined("'Namespace' has no attribute '" + name + "'");
    default: {
      Value method = bound_method(this, object, name);
      if (!method.is_undefined()) return method;
      const std::string what = object.is_none() ? "None" : type_name(object) + " object";
      return Value::undefined("'" + what + "' has no attribute '" + name + "'");
    }
  }
}

Value Interpreter::get_item(const Value& object, const Value& key, int line) {
  if (object.is_undefined()) {
    throw TemplateError(object.str.empty() ? "subscript of an undefined value" : object.str, line);
  }
  if (object.generator) throw TemplateError("'generator' object is not subscriptable", line);
  if (object.is_mapping() && hashable(key)) {
    if (const Value* v = object.dict->find(key)) return *v;
  } else if ((object.is_list() || object.is_string()) &&
             (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool)) {
    int64_t i = key.kind == Value::Kind::kBool ? key.boolean : key.integer;
    if (object.is_list()) {
      const auto n = static_cast<int64_t>(object.list->size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return (*object.list)[static_cast<size_t>(i)];
    } else {
      std::vector<std::string_view> cps = code_points(object.str);
      const auto n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(std::string(cps[static_cast<size_t>(i)]));
    }
    return Value::undefined(type_name(object) + " object has no element " + std::to_string(key.integer));
  }
  if (key.is_string()) return get_attr(object, key.str, line);
  return Value::undefined(type_name(object) + " object has no element " + repr(key));
}

}  // namespace rlrun::engine::jinja
