// jinja/builtins.cc - jinja2's tests, the globals HF adds (raise_exception, strftime_now) and the
// str / dict methods chat templates call.
#include <unordered_map>

#include "engine/tokenizer/internal.h"  // next_code_point
#include "engine/tokenizer/jinja/interpreter.h"
#include "engine/tokenizer/jinja/text.h"

namespace rlrun::engine::jinja {
namespace {

using TestFn = bool (*)(const Value&, const CallArgs&, int line);

const Value kUndef = Value();

const Value& arg0(const CallArgs& a, int line, const char* test) {
  if (a.positional.empty()) throw TemplateError(std::string("test '") + test + "' needs an argument", line);
  return a.positional[0];
}

bool integral(const Value& v) { return v.kind == Value::Kind::kInt; }

bool cased(const std::string& s, bool upper) {  // str.isupper() / str.islower()
  bool any = false;
  for (std::string_view cp : code_points(s)) {
    std::string up = py_upper(cp), low = py_lower(cp);
    if (up == low) continue;  // not cased
    any = true;
    if (std::string(cp) != (upper ? up : low)) return false;
  }
  return any;
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"defined", [](const Value& v, const CallArgs&, int) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs&, int) { return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs&, int) { return v.is_none(); }},
      {"boolean", [](const Value& v, const CallArgs&, int) { return v.kind == Value::Kind::kBool; }},
      {"true", [](const Value& v, const CallArgs&, int) { return v.kind == Value::Kind::kBool && v.boolean; }},
      {"false", [](const Value& v, const CallArgs&, int) { return v.kind == Value::Kind::kBool && !v.boolean; }},
      {"integer", [](const Value& v, const CallArgs&, int) { return integral(v); }},
      {"float", [](const Value& v, const CallArgs&, int) { return v.kind == Value::Kind::kFloat; }},
      {"number", [](const Value& v, const CallArgs&, int) { return v.is_number(); }},
      {"string", [](const Value& v, const CallArgs&, int) { return v.is_string(); }},
      {"mapping", [](const Value& v, const CallArgs&, int) { return v.kind == Value::Kind::kDict; }},
      {"iterable", [](const Value& v, const CallArgs&, int) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.kind == Value::Kind::kDict;
       }},
      {"sequence", [](const Value& v, const CallArgs&, int) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.kind == Value::Kind::kDict;
       }},
      {"callable", [](const Value& v, const CallArgs&, int) { return v.is_function(); }},
      {"odd", [](const Value& v, const CallArgs&, int l) {
         if (!integral(v)) throw TemplateError("test 'odd' needs an integer", l);
         return v.integer % 2 != 0;
       }},
      {"even", [](const Value& v, const CallArgs&, int l) {
         if (!integral(v)) throw TemplateError("test 'even' needs an integer", l);
         return v.integer % 2 == 0;
       }},
      {"divisibleby", [](const Value& v, const CallArgs& a, int l) {
         const Value& d = arg0(a, l, "divisibleby");
         if (!integral(v) || !integral(d) || d.integer == 0) throw TemplateError("bad divisibleby operands", l);
         return v.integer % d.integer == 0;
       }},
      {"eq", [](const Value& v, const CallArgs& a, int l) { return equals(v, arg0(a, l, "eq")); }},
      {"equalto", [](const Value& v, const CallArgs& a, int l) { return equals(v, arg0(a, l, "equalto")); }},
      {"==", [](const Value& v, const CallArgs& a, int l) { return equals(v, arg0(a, l, "==")); }},
      {"ne", [](const Value& v, const CallArgs& a, int l) { return !equals(v, arg0(a, l, "ne")); }},
      {"!=", [](const Value& v, const CallArgs& a, int l) { return !equals(v, arg0(a, l, "!=")); }},
      {"lt", [](const Value& v, const CallArgs& a, int l) { return less(v, arg0(a, l, "lt")); }},
      {"lessthan", [](const Value& v, const CallArgs& a, int l) { return less(v, arg0(a, l, "lessthan")); }},
      {"<", [](const Value& v, const CallArgs& a, int l) { return less(v, arg0(a, l, "<")); }},
      {"gt", [](const Value& v, const CallArgs& a, int l) { return less(arg0(a, l, "gt"), v); }},
      {"greaterthan", [](const Value& v, const CallArgs& a, int l) { return less(arg0(a, l, "greaterthan"), v); }},
      {">", [](const Value& v, const CallArgs& a, int l) { return less(arg0(a, l, ">"), v); }},
      {"le", [](const Value& v, const CallArgs& a, int l) { const Value& b = arg0(a, l, "le"); return less(v, b) || equals(v, b); }},
      {"<=", [](const Value& v, const CallArgs& a, int l) { const Value& b = arg0(a, l, "<="); return less(v, b) || equals(v, b); }},
      {"ge", [](const Value& v, const CallArgs& a, int l) { const Value& b = arg0(a, l, "ge"); return less(b, v) || equals(v, b); }},
      {">=", [](const Value& v, const CallArgs& a, int l) { const Value& b = arg0(a, l, ">="); return less(b, v) || equals(v, b); }},
      {"in", [](const Value& v, const CallArgs& a, int l) { return contains(arg0(a, l, "in"), v); }},
      {"sameas", [](const Value& v, const CallArgs& a, int l) {
         const Value& b = arg0(a, l, "sameas");  // `is` identity: exact for None/bools, by value otherwise
         return v.kind == b.kind && equals(v, b);
       }},
      {"lower", [](const Value& v, const CallArgs&, int) { return v.is_string() && cased(v.str, false); }},
      {"upper", [](const Value& v, const CallArgs&, int) { return v.is_string() && cased(v.str, true); }},
  };
  return table;
}

Value function(std::string name, std::function<Value(const CallArgs&)> fn) {
  return Value(std::make_shared<Function>(Function{std::move(name), std::move(fn)}));
}

Value make_dict_from_kwargs(const CallArgs& a, int line, const char* what) {
  auto d = std::make_shared<Dict>();
  for (const Value& p : a.positional) {
    if (!p.is_mapping()) throw TemplateError(std::string(what) + "() takes a mapping or keyword arguments", line);
    for (const auto& [k, v] : p.dict->items) d->set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d->set(k, v);
  return Value(std::move(d));
}

}  // namespace

bool is_known_test(const std::string& name) { return tests().count(name) > 0; }

bool Interpreter::apply_test(const std::string& name, const Value& subject, const CallArgs& args, int line) {
  auto it = tests().find(name);
  if (it == tests().end()) throw unknown_name_error(name, false, true, line);
  return it->second(subject, args, line);
}

void add_builtin_globals(Interpreter* in, Dict* globals) {
  globals->set("range", function("range", [in](const CallArgs& a) {
    auto num = [&](size_t i) {
      const Value& v = a.positional[i];
      if (v.kind != Value::Kind::kInt && v.kind != Value::Kind::kBool) {
        throw TemplateError("range() takes integers, not " + type_name(v));
      }
      return v.kind == Value::Kind::kBool ? int64_t{v.boolean} : v.integer;
    };
    if (a.positional.empty() || a.positional.size() > 3) throw TemplateError("range() takes 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) stop = num(0);
    else { start = num(0); stop = num(1); }
    if (a.positional.size() == 3) step = num(2);
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    __int128 span = static_cast<__int128>(stop) - start;
    __int128 count = step > 0 ? (span > 0 ? (span + step - 1) / step : 0) : (span < 0 ? (-span + (-step) - 1) / (-step) : 0);
    if (count > in->limits().max_range) {
      throw limit_error("range too big: the sandbox blocks ranges larger than " +
                          std::to_string(in->limits().max_range), 0);
    }
    List out;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.emplace_back(start + i * step);
    return Value(std::move(out));
  }));
  globals->set("namespace", function("namespace", [in](const CallArgs& a) {
    Value d = make_dict_from_kwargs(a, 0, "namespace");
    in->track_namespace(d.dict);
    return Value(d.dict, Value::Kind::kNamespace);
  }));
  globals->set("dict", function("dict", [](const CallArgs& a) { return make_dict_from_kwargs(a, 0, "dict"); }));
  globals->set("raise_exception", function("raise_exception", [](const CallArgs& a) -> Value {
    TemplateError e(a.positional.empty() ? std::string() : to_str(a.positional[0]));
    e.raised = true;
    throw e;
  }));
  globals->set("strftime_now", function("strftime_now", [in](const CallArgs& a) {
    std::string format = a.positional.empty() ? std::string() : to_str(a.positional[0]);
    if (format.size() > 256) throw TemplateError("strftime_now: format longer than 256 characters");
    std::tm now = in->now();
    std::string out(1024, '\0');
    size_t n = format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &now);
    out.resize(n);
    return Value(std::move(out));
  }));
}

namespace {

// str.format with plain fields: {} {0} {name}, conversions !s and !r, {{ and }}; no format specs.
std::string py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; ++i; continue; }
      throw TemplateError("Single '}' encountered in format string");
    }
    if (c != '{') { out += c; continue; }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; ++i; continue; }
    size_t end = fmt.find('}', i);
    if (end == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, end - i - 1);
    i = end;
    char conversion = 's';
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r')) {
        throw TemplateError("str.format: unsupported field {" + field + "}");
      }
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos) {
      throw TemplateError("str.format: format specs and attribute lookups ({" + field + "}) are not supported");
    }
    const Value* v = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t index = field.empty() ? auto_index++ : std::stoul(field);
      if (index >= a.positional.size()) throw TemplateError("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      v = &a.positional[index];
    } else {
      for (const auto& [k, val] : a.keyword) {
        if (k == field) v = &val;
      }
      if (v == nullptr) throw TemplateError("'" + field + "'");
    }
    out += conversion == 'r' ? repr(*v) : to_str(*v);
  }
  return out;
}

Value str_method(Interpreter* in, const std::string& s, const std::string& name) {
  auto opt_str = [](const CallArgs& a, size_t i, const char* key) -> std::optional<std::string> {
    const Value& v = a.get(i, key, kUndef);
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    return to_str(v);
  };
  auto affix = [s](bool prefix) {
    return [s, prefix](const CallArgs& a) {
      const Value& v = a.get(0, prefix ? "prefix" : "suffix", kUndef);
      List options = v.is_list() ? *v.list : List{v};
      for (const Value& o : options) {
        if (!o.is_string()) throw TemplateError("startswith/endswith take a string or a tuple of strings");
        if (o.str.size() <= s.size() &&
            (prefix ? s.compare(0, o.str.size(), o.str) : s.compare(s.size() - o.str.size(), o.str.size(), o.str)) == 0) {
          return Value(true);
        }
      }
      return Value(false);
    };
  };
  const std::string qual = "str." + name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return function(qual, [s, left, right, opt_str](const CallArgs& a) {
      return Value(py_strip(s, opt_str(a, 0, "chars"), left, right));
    });
  }
  if (name == "split") {
    return function(qual, [s, opt_str](const CallArgs& a) {
      std::optional<std::string> sep = opt_str(a, 0, "sep");
      if (sep && sep->empty()) throw TemplateError("empty separator");
      const Value& m = a.get(1, "maxsplit", Value(-1));
      List out;
      for (auto& piece : py_split(s, sep, m.kind == Value::Kind::kInt ? m.integer : -1)) out.emplace_back(std::move(piece));
      return Value(std::move(out));
    });
  }
  if (name == "startswith") return function(qual, affix(true));
  if (name == "endswith") return function(qual, affix(false));
  if (name == "upper") return function(qual, [s](const CallArgs&) { return Value(py_upper(s)); });
  if (name == "lower") return function(qual, [s](const CallArgs&) { return Value(py_lower(s)); });
  if (name == "title") return function(qual, [s](const CallArgs&) { return Value(py_title(s)); });
  if (name == "capitalize") return function(qual, [s](const CallArgs&) { return Value(py_capitalize(s)); });
  if (name == "replace") {
    return function(qual, [s, in, opt_str](const CallArgs& a) {
      const Value& c = a.get(2, "count", Value(-1));
      std::string out = py_replace(s, opt_str(a, 0, "old").value_or(""), opt_str(a, 1, "new").value_or(""),
                                   c.kind == Value::Kind::kInt ? c.integer : -1);
      in->check_string(out.size(), 0);
      return Value(std::move(out));
    });
  }
  if (name == "find" || name == "count") {
    bool find = name == "find";
    return function(qual, [s, find, opt_str](const CallArgs& a) {
      std::string sub = opt_str(a, 0, "sub").value_or("");
      if (find) {
        size_t at = s.find(sub);
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_point_count(s.substr(0, at))));
      }
      if (sub.empty()) return Value(static_cast<int64_t>(code_point_count(s) + 1));
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return function(qual, [s, in](const CallArgs& a) {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(a.get(0, "iterable", kUndef), 0)) {
        if (!v.is_string()) throw TemplateError("sequence item: expected str instance, " + type_name(v) + " found");
        if (!first) out += s;
        first = false;
        out += v.str;
        in->check_string(out.size(), 0);
      }
      return Value(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    return function(qual, [s, name](const CallArgs&) {
      if (s.empty()) return Value(false);
      for (std::string_view cp : code_points(s)) {
        size_t i = 0;
        int32_t c = next_code_point(cp, &i);
        bool ok = name == "isdigit" ? (c >= '0' && c <= '9')
                  : name == "isspace" ? py_isspace(c)
                  : name == "isalpha" ? (py_upper(cp) != py_lower(cp) || (c > 127 && !py_isspace(c)))
                                      : ((c >= '0' && c <= '9') || py_upper(cp) != py_lower(cp));
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  if (name == "isupper" || name == "islower") {
    bool upper = name == "isupper";
    return function(qual, [s, upper](const CallArgs&) { return Value(cased(s, upper)); });
  }
  if (name == "format") return function(qual, [s](const CallArgs& a) { return Value(py_format(s, a)); });
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  const std::string qual = "dict." + name;
  if (name == "items") {
    return function(qual, [self](const CallArgs&) {
      List out;
      for (const auto& [k, v] : self.dict->items) out.emplace_back(List{Value(k), v}, true);
      return Value(std::move(out));
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return function(qual, [self, keys](const CallArgs&) {
      List out;
      for (const auto& [k, v] : self.dict->items) out.push_back(keys ? Value(k) : v);
      return Value(std::move(out));
    });
  }
  if (name == "get") {
    return function(qual, [self](const CallArgs& a) {
      const Value& key = a.get(0, "key", kUndef);
      if (hashable(key)) {
        if (const Value* v = self.dict->find(key)) return *v;
      }
      return a.get(1, "default", Value::none());
    });
  }
  return Value();
}

}  // namespace

Value bound_method(Interpreter* in, const Value& self, const std::string& name) {
  static const char* kMutators[] = {"append", "extend", "insert", "pop", "remove", "clear", "update",
                                    "setdefault", "popitem", "sort", "reverse", "add", "discard"};
  if (self.is_list() || self.kind == Value::Kind::kDict) {
    for (const char* m : kMutators) {
      if (name == m) {
        std::string message = "access to attribute '" + name + "' of '" + type_name(self) + "' object is unsafe.";
        return function(name, [message](const CallArgs&) -> Value { throw TemplateError(message); });
      }
    }
  }
  if (self.is_string()) return str_method(in, self.str, name);
  if (self.kind == Value::Kind::kDict) return dict_method(self, name);
  return Value();
}

}  // namespace rlrun::engine::jinja
