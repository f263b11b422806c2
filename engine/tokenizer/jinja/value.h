// jinja/value.h - the values a chat template computes with, with Python's semantics.
//
// Jinja runs on Python objects, and a template's output depends on how Python prints, compares and
// tests them (str(1.0) is "1.0", str(None) is "None", [1] == [1], "" is falsy). Value mirrors the
// kinds chat templates meet: jinja2's Undefined, None, bool, int (64-bit; overflow is an error, not
// a bigint), float, str (UTF-8; lengths and slices count code points), list (tuples too), dict
// (insertion-ordered, string keys), namespace (the one mutable kind), and callables (builtins,
// macros, bound methods).
//
// Lists and dicts are shared, immutable once built (ImmutableSandboxedEnvironment forbids
// mutation); a namespace is shared and mutable, as in jinja2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rlrun::engine::jinja {

// Everything that stops a render or a parse: a syntax error, an unsupported feature, a type error,
// raise_exception(), a bound exceeded. `line` is the template line (0: not known yet; the caller
// adds it). Internal to the interpreter; ChatTemplate turns it into a Status.
struct TemplateError : std::runtime_error {
  TemplateError(std::string message, int line = 0) : std::runtime_error(std::move(message)), line(line) {}
  int line;
  bool raised = false;  // from raise_exception(): the message is the template author's, verbatim
  bool limit = false;   // a bound on work or size was exceeded (Limits)
};

// A TemplateError for an exceeded bound.
inline TemplateError limit_error(std::string message, int line) {
  TemplateError e(std::move(message), line);
  e.limit = true;
  return e;
}

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Function;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value undefined(std::string hint) { Value v; v.str = std::move(hint); return v; }
  static Value none() { Value v; v.kind = Kind::kNone; return v; }
  Value(bool b) : kind(Kind::kBool), boolean(b) {}                // NOLINT: implicit by design
  Value(int64_t i) : kind(Kind::kInt), integer(i) {}              // NOLINT
  Value(int i) : kind(Kind::kInt), integer(i) {}                  // NOLINT
  Value(double f) : kind(Kind::kFloat), real(f) {}                // NOLINT
  Value(std::string s) : kind(Kind::kString), str(std::move(s)) {}  // NOLINT
  Value(const char* s) : kind(Kind::kString), str(s) {}           // NOLINT
  Value(List l, bool tuple = false);                              // NOLINT
  Value(std::shared_ptr<Dict> d, Kind k = Kind::kDict);           // NOLINT
  Value(std::shared_ptr<Function> f);                             // NOLINT

  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  bool is_function() const { return kind == Kind::kFunction; }

  Kind kind = Kind::kUndefined;
  bool boolean = false;
  bool tuple = false;      // a list written as a tuple: prints as (a, b)
  // A list standing for one of jinja2's generators (what map/select/selectattr/... return): always
  // truthy, no len(), no subscript, not JSON serializable; `|list` makes it a list.
  bool generator = false;
  // A string that is markupsafe.Markup (from |safe or |escape): `Markup + str` escapes the str.
  bool safe = false;
  int64_t integer = 0;
  double real = 0;
  int depth = 0;    // kList: nesting depth (see kMaxNesting)
  std::string str;  // kString; for kUndefined, the hint that names what was missing
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;  // kDict (never mutated after construction) or kNamespace
  std::shared_ptr<Function> function;
};

// Lists and dicts nest at most this deep (a TemplateError beyond): printing, comparing and freeing
// them recurse, and a template must not be able to build a value that overflows the stack.
constexpr int kMaxNesting = 512;

// Insertion-ordered like Python's dict. Keys are str, or int/float/bool/None (dict literals such
// as {0: 0, 512: 128}); Python's == decides key identity (1, 1.0 and True are one key).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;  // nesting depth, raised by set() (a namespace's only grows)
  const Value* find_str(std::string_view key) const;  // a str key (no Value built)
  const Value* find(const Value& key) const;
  void set(const Value& key, Value value);  // replaces in place or appends
};

// Whether `key` can be a dict key (Python's hashable, among template values).
bool hashable(const Value& key);
// How deep lists and dicts nest in `v` (0 for a scalar).
int nesting(const Value& v);

// Positional and keyword arguments of a call, as written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`, else `fallback`.
  Value get(size_t index, std::string_view name, const Value& fallback) const;
};

struct Function {
  std::string name;  // for messages: "raise_exception", "str.strip", "macro foo"
  std::function<Value(const CallArgs&)> call;
};

// Python's bool(x).
bool truthy(const Value& v);
// Python's str(x) (jinja2's rendering of {{ x }}): undefined -> "", None -> "None", 1.0 -> "1.0",
// lists and dicts as their repr.
std::string to_str(const Value& v);
// Python's repr(x).
std::string repr(const Value& v);
// Python's ==, deep for lists and dicts; int 1 == float 1.0 == True.
bool equals(const Value& a, const Value& b);
// Python's <, for numbers, strings (code point order) and lists; else a TemplateError.
bool less(const Value& a, const Value& b);
// The name Python gives the type, for messages ("str", "dict", "NoneType").
std::string type_name(const Value& v);
// Python's float repr: shortest round-trip digits, exponent outside [1e-4, 1e16).
std::string float_repr(double x);

// json.dumps(x, ensure_ascii=..., indent=..., separators=..., sort_keys=...) as HF's tojson filter
// calls it (ensure_ascii=False by default). indent < 0: no indent (separators ", " and ": " unless
// given).
struct JsonStyle {
  bool ensure_ascii = false;  // non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
  int indent = -1;
  std::string item_separator;  // empty: Python's default for the indent
  std::string key_separator;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace rlrun::engine::jinja
