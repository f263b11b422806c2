// jinja/interpreter.h - renders a parsed Template with jinja2's semantics (as HF's
// ImmutableSandboxedEnvironment runs chat templates), within bounds an untrusted template cannot
// exceed. Internal to engine/tokenizer/chat_template.cc.
//
// Errors are TemplateError exceptions inside the interpreter (a render is deeply recursive, and a
// failure anywhere ends it); ChatTemplate turns them into a Status at the API boundary.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/value.h"

namespace rlrun::engine::jinja {

struct Limits {
  size_t max_output_bytes = size_t{16} << 20;  // the rendered text, and any one string or block
  int64_t max_loop_iterations = 1'000'000;     // all loops of one render together
  int64_t max_range = 100'000;                 // jinja2's sandbox MAX_RANGE
  size_t max_list_items = 1'000'000;           // a list built by the template
  int max_call_depth = 64;                     // nested macro calls (recursion)
};

// A variable scope: the render's globals, a for loop, a macro call. Lookups walk to the parent.
struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent) : parent(std::move(parent)) {}
  const Value* find(std::string_view name) const;
  Dict vars;
  std::shared_ptr<Scope> parent;
};

class Interpreter {
 public:
  // `now`: the wall clock strftime_now() formats (broken-down local time).
  Interpreter(const Limits& limits, std::function<std::tm()> now);

  // Renders `tmpl` with `globals` (messages, add_generation_prompt, special tokens, ...).
  std::string render(const Template& tmpl, const Dict& globals);

  // Used by the builtins (jinja/builtins.cc).
  Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args, int line);
  bool apply_test(const std::string& name, const Value& subject, const CallArgs& args, int line);
  Value call(const Value& callee, const CallArgs& args, int line);
  Value get_attr(const Value& object, const std::string& name, int line);
  Value get_item(const Value& object, const Value& key, int line);
  void count_iterations(int64_t n, int line);
  void check_string(size_t bytes, int line) const;
  void check_list(size_t items, int line) const;
  const Limits& limits() const { return limits_; }
  // A namespace made by this render: emptied when the render ends, since one may hold itself
  // (a shared_ptr cycle that would otherwise outlive the render).
  void track_namespace(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }
  std::tm now() const { return now_(); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, std::string* out);
  Flow exec(const Node& node, std::string* out);
  void exec_for(const Node& node, std::string* out);
  void exec_set(const Node& node);
  Value make_macro(const Node& node, std::shared_ptr<Scope> defining_scope);
  void emit(std::string_view text, std::string* out, int line) const;

  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_call(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first);
  Value lookup(const std::string& name) const;
  void release_cycles();

  Limits limits_;
  std::function<std::tm()> now_;
  std::shared_ptr<Scope> scope_;
  std::vector<std::weak_ptr<Dict>> namespaces_;
  std::vector<std::weak_ptr<Scope>> macro_scopes_;  // a scope holds its macros, which hold it
  int64_t iterations_ = 0;
  int call_depth_ = 0;
};

// Python's binary operators on template values (jinja/operators.cc); `op` is the operator text.
Value binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& in, int line);
// `item in container`.
bool contains(const Value& container, const Value& item);
// Python's sequence slicing; `list` or `str` (by code point).
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step, int line);
// Values a for loop or a filter iterates: list items, dict keys, string code points; undefined
// is empty; anything else a TemplateError.
List iterate(const Value& v, int line);

// The globals every render has: range, namespace, dict, raise_exception, strftime_now.
void add_builtin_globals(Interpreter* in, Dict* globals);
// Methods of str and dict (`s.strip()`, `d.items()`); undefined when `name` is not one.
Value bound_method(Interpreter* in, const Value& self, const std::string& name);

}  // namespace rlrun::engine::jinja
