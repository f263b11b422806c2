// jinja/filters.cc - jinja2's builtin filters that chat templates use, with HF's tojson.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "common/html.h"
#include "engine/tokenizer/jinja/interpreter.h"
#include "engine/tokenizer/jinja/text.h"

namespace rlrun::engine::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&, int line);

const Value kNone = Value::none();
const Value kUndef = Value();

std::string str_arg(const CallArgs& a, size_t i, std::string_view name, const std::string& fallback) {
  const Value& v = a.get(i, name, kUndef);
  return v.is_undefined() ? fallback : to_str(v);
}

int64_t int_arg(const CallArgs& a, size_t i, std::string_view name, int64_t fallback, int line) {
  const Value& v = a.get(i, name, kUndef);
  if (v.is_undefined()) return fallback;
  if (v.kind == Value::Kind::kInt) return v.integer;
  if (v.kind == Value::Kind::kBool) return v.boolean;
  throw TemplateError(std::string(name) + " must be an integer, not " + type_name(v), line);
}

// jinja2's make_attrgetter: "a.b.0" looks up each part with getitem semantics.
Value get_path(Interpreter& in, const Value& obj, const std::string& path, int line) {
  Value cur = obj;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    int64_t index;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    Value key = ec == std::errc() && p == part.data() + part.size() ? Value(index) : Value(part);
    if (cur.is_undefined()) return cur;
    cur = in.get_item(cur, key, line);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value generator(List items) {
  Value v(std::move(items));
  v.generator = true;
  return v;
}

// Sort key of dictsort/sort/min/max: strings compare lowercased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_lower(v.str)) : v;
}

Value f_length(Interpreter&, const Value& v, const CallArgs&, int line) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return Value(0);
    case Value::Kind::kString: return Value(static_cast<int64_t>(code_point_count(v.str)));
    case Value::Kind::kList:
      if (v.generator) break;
      return Value(static_cast<int64_t>(v.list->size()));
    case Value::Kind::kDict: return Value(static_cast<int64_t>(v.dict->items.size()));
    default: break;
  }
  throw TemplateError("object of type '" + type_name(v) + "' has no len()", line);
}

Value f_default(Interpreter&, const Value& v, const CallArgs& a, int) {
  const Value& fallback = a.get(0, "default_value", Value(std::string()));
  const bool boolean = truthy(a.get(1, "boolean", Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return fallback;
  return v;
}

Value f_tojson(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  JsonStyle style;
  style.ensure_ascii = truthy(a.get(0, "ensure_ascii", Value(false)));
  const Value& indent = a.get(1, "indent", kNone);
  if (indent.kind == Value::Kind::kInt) style.indent = static_cast<int>(std::clamp<int64_t>(indent.integer, 0, 64));
  else if (!indent.is_none() && !indent.is_undefined()) throw TemplateError("tojson: indent must be an integer", line);
  const Value& seps = a.get(2, "separators", kNone);
  if (seps.is_list() && seps.list->size() == 2) {
    style.item_separator = to_str((*seps.list)[0]);
    style.key_separator = to_str((*seps.list)[1]);
  }
  style.sort_keys = truthy(a.get(3, "sort_keys", Value(false)));
  std::string out = to_json(v, style);
  in.check_string(out.size(), line);
  return Value(std::move(out));
}

Value f_trim(Interpreter&, const Value& v, const CallArgs& a, int) {
  const Value& chars = a.get(0, "chars", kNone);
  std::optional<std::string> set;
  if (!chars.is_none() && !chars.is_undefined()) set = to_str(chars);
  return Value(py_strip(to_str(v), set, true, true));
}

Value f_upper(Interpreter&, const Value& v, const CallArgs&, int) { return Value(py_upper(to_str(v))); }
Value f_lower(Interpreter&, const Value& v, const CallArgs&, int) { return Value(py_lower(to_str(v))); }
Value f_capitalize(Interpreter&, const Value& v, const CallArgs&, int) { return Value(py_capitalize(to_str(v))); }
Value f_title(Interpreter&, const Value& v, const CallArgs&, int) { return Value(jinja_title(to_str(v))); }
Value f_string(Interpreter&, const Value& v, const CallArgs&, int) { return Value(to_str(v)); }
Value markup(std::string s) {
  Value v(std::move(s));
  v.safe = true;
  return v;
}

Value f_safe(Interpreter&, const Value& v, const CallArgs&, int) {
  return v.is_string() && v.safe ? v : markup(to_str(v));
}

Value f_escape(Interpreter&, const Value& v, const CallArgs&, int) {
  return v.is_string() && v.safe ? v : markup(html_escape(to_str(v)));
}

Value f_replace(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  std::string out = py_replace(to_str(v), str_arg(a, 0, "old", ""), str_arg(a, 1, "new", ""),
                               a.get(2, "count", kNone).is_none() ? -1 : int_arg(a, 2, "count", -1, line));
  in.check_string(out.size(), line);
  return Value(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  const std::string sep = str_arg(a, 0, "d", "");
  const Value& attribute = a.get(1, "attribute", kNone);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v, line)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? item : get_path(in, item, to_str(attribute), line));
    in.check_string(out.size(), line);
  }
  return Value(std::move(out));
}

Value f_first(Interpreter&, const Value& v, const CallArgs&, int line) {
  List items = iterate(v, line);
  return items.empty() ? Value::undefined("no first item, sequence was empty") : items.front();
}

Value f_last(Interpreter&, const Value& v, const CallArgs&, int line) {
  if (v.generator) throw TemplateError("'generator' object is not reversible", line);
  List items = iterate(v, line);
  return items.empty() ? Value::undefined("no last item, sequence was empty") : items.back();
}

Value f_list(Interpreter&, const Value& v, const CallArgs&, int line) { return Value(iterate(v, line)); }

Value f_reverse(Interpreter&, const Value& v, const CallArgs&, int line) {
  if (v.is_string()) {
    std::vector<std::string_view> cps = code_points(v.str);
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out.append(*it);
    return Value(std::move(out));
  }
  List items = iterate(v, line);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_items(Interpreter&, const Value& v, const CallArgs&, int line) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_mapping()) throw TemplateError("Can only get item pairs from a mapping.", line);
  List out;
  for (const auto& [k, e] : v.dict->items) out.emplace_back(List{Value(k), e}, true);
  return Value(std::move(out));
}

Value f_int(Interpreter&, const Value& v, const CallArgs& a, int line) {
  const Value& fallback = a.get(0, "default", Value(0));
  if (v.kind == Value::Kind::kInt) return v;
  if (v.kind == Value::Kind::kBool) return Value(int64_t{v.boolean});
  if (v.kind == Value::Kind::kFloat) {
    if (!std::isfinite(v.real) || std::abs(v.real) > 9.2e18) return fallback;
    return Value(static_cast<int64_t>(v.real));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str, std::nullopt, true, true);
    std::erase(s, '_');
    const int base = static_cast<int>(int_arg(a, 1, "base", 10, line));
    int64_t out;
    const char* b = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
    auto [p, ec] = std::from_chars(b, s.data() + s.size(), out, base);
    if (ec == std::errc() && p == s.data() + s.size() && !s.empty()) return Value(out);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::abs(d) < 9.2e18) {
      return Value(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

Value f_float(Interpreter&, const Value& v, const CallArgs& a, int) {
  const Value& fallback = a.get(0, "default", Value(0.0));
  if (v.kind == Value::Kind::kFloat) return v;
  if (v.kind == Value::Kind::kInt) return Value(static_cast<double>(v.integer));
  if (v.kind == Value::Kind::kBool) return Value(v.boolean ? 1.0 : 0.0);
  if (v.is_string()) {
    std::string s = py_strip(v.str, std::nullopt, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value(d);
  }
  return fallback;
}

Value f_abs(Interpreter&, const Value& v, const CallArgs&, int line) {
  if (v.kind == Value::Kind::kFloat) return Value(std::abs(v.real));
  if (v.kind == Value::Kind::kInt && v.integer != INT64_MIN) return Value(v.integer < 0 ? -v.integer : v.integer);
  if (v.kind == Value::Kind::kBool) return Value(int64_t{v.boolean});
  throw TemplateError("bad operand type for abs(): '" + type_name(v) + "'", line);
}

Value f_indent(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  const Value& width = a.get(0, "width", Value(4));
  const std::string pad = width.is_string() ? width.str : std::string(static_cast<size_t>(std::clamp<int64_t>(int_arg(a, 0, "width", 4, line), 0, 1024)), ' ');
  const bool first = truthy(a.get(1, "first", Value(false)));
  const bool blank = truthy(a.get(2, "blank", Value(false)));
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines;  // str.splitlines() on \n, \r\n and \r
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
    in.check_string(out.size(), line);
  }
  return Value(first ? pad + out : out);
}

Value f_unique(Interpreter&, const Value& v, const CallArgs& a, int line) {
  const bool case_sensitive = truthy(a.get(0, "case_sensitive", Value(false)));
  List out, keys;
  for (const Value& item : iterate(v, line)) {
    Value key = !case_sensitive && item.is_string() ? Value(py_lower(item.str)) : item;
    bool seen = false;
    for (const Value& k : keys) seen = seen || equals(k, key);
    if (!seen) { keys.push_back(key); out.push_back(item); }
  }
  return Value(std::move(out));
}

Value f_attr(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  return in.get_attr(v, str_arg(a, 0, "name", ""), line);
}

// select / reject / selectattr / rejectattr: keep the items whose test (truthiness when none is
// named) is `want`; the *attr forms test an attribute of each item.
Value select_items(Interpreter& in, const Value& v, const CallArgs& a, int line, bool by_attr, bool want) {
  size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (a.positional.empty()) throw TemplateError("selectattr/rejectattr need an attribute name", line);
    attribute = to_str(a.positional[next++]);
  }
  std::string test;
  if (next < a.positional.size()) test = to_str(a.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<long>(next), a.positional.end());
  List out;
  if (!truthy(v)) return generator(std::move(out));
  for (const Value& item : iterate(v, line)) {
    in.count_iterations(1, line);
    Value subject = by_attr ? get_path(in, item, attribute, line) : item;
    bool ok = test.empty() ? truthy(subject) : in.apply_test(test, subject, test_args, line);
    if (ok == want) out.push_back(item);
  }
  return generator(std::move(out));
}

// jinja2's select/map skip a falsy input (`if value: for item in value`), so none | map(...) is empty.
Value f_select(Interpreter& in, const Value& v, const CallArgs& a, int l) { return select_items(in, v, a, l, false, true); }
Value f_reject(Interpreter& in, const Value& v, const CallArgs& a, int l) { return select_items(in, v, a, l, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, const CallArgs& a, int l) { return select_items(in, v, a, l, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, const CallArgs& a, int l) { return select_items(in, v, a, l, true, false); }

Value f_map(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  List out;
  if (!truthy(v)) return generator(std::move(out));
  for (const auto& [k, attribute] : a.keyword) {
    if (k != "attribute") continue;
    const Value& fallback = a.get(SIZE_MAX, "default", kUndef);
    for (const Value& item : iterate(v, line)) {
      Value x = get_path(in, item, to_str(attribute), line);
      out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
    }
    return generator(std::move(out));
  }
  if (a.positional.empty()) throw TemplateError("map() needs a filter name or attribute=", line);
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v, line)) {
    in.count_iterations(1, line);
    out.push_back(in.apply_filter(to_str(a.positional[0]), item, rest, line));
  }
  return generator(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  const bool reverse = truthy(a.get(0, "reverse", Value(false)));
  const bool case_sensitive = truthy(a.get(1, "case_sensitive", Value(false)));
  const Value& attribute = a.get(2, "attribute", kNone);
  List items = iterate(v, line);
  auto key = [&](const Value& item) {
    Value k = attribute.is_none() ? item : get_path(in, item, to_str(attribute), line);
    return sort_key(k, case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value(std::move(items));
}

Value f_dictsort(Interpreter&, const Value& v, const CallArgs& a, int line) {
  const bool case_sensitive = truthy(a.get(0, "case_sensitive", Value(false)));
  const std::string by = to_str(a.get(1, "by", Value("key")));
  const bool reverse = truthy(a.get(2, "reverse", Value(false)));
  if (!v.is_mapping()) throw TemplateError("dictsort: expected a mapping, got " + type_name(v), line);
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"", line);
  const size_t pos = by == "key" ? 0 : 1;
  List items;
  for (const auto& [k, e] : v.dict->items) items.emplace_back(List{Value(k), e}, true);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key((*x.list)[pos], case_sensitive), ky = sort_key((*y.list)[pos], case_sensitive);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value(std::move(items));
}

template <bool kMax>
Value f_min_max(Interpreter& in, const Value& v, const CallArgs& a, int line) {
  const bool case_sensitive = truthy(a.get(0, "case_sensitive", Value(false)));
  const Value attribute = a.get(1, "attribute", kNone);
  List items = iterate(v, line);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    return sort_key(attribute.is_none() ? item : get_path(in, item, to_str(attribute), line), case_sensitive);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    if (kMax ? less(key(items[best]), key(items[i])) : less(key(items[i]), key(items[best]))) best = i;
  }
  return items[best];
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"length", f_length}, {"count", f_length}, {"default", f_default}, {"d", f_default},
      {"tojson", f_tojson}, {"trim", f_trim}, {"upper", f_upper}, {"lower", f_lower},
      {"capitalize", f_capitalize}, {"title", f_title}, {"string", f_string}, {"safe", f_safe},
      {"e", f_escape}, {"escape", f_escape}, {"replace", f_replace}, {"join", f_join},
      {"first", f_first}, {"last", f_last}, {"list", f_list}, {"reverse", f_reverse},
      {"items", f_items}, {"int", f_int}, {"float", f_float}, {"abs", f_abs}, {"indent", f_indent},
      {"unique", f_unique}, {"attr", f_attr}, {"select", f_select}, {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"map", f_map}, {"sort", f_sort},
      {"dictsort", f_dictsort}, {"min", f_min_max<false>}, {"max", f_min_max<true>},
  };
  return table;
}

}  // namespace

bool is_known_filter(const std::string& name) { return filters().count(name) > 0; }

Value Interpreter::apply_filter(const std::string& name, const Value& subject, const CallArgs& args, int line) {
  if (name.empty()) return subject;
  auto it = filters().find(name);
  if (it == filters().end()) throw unknown_name_error(name, true, true, line);
  return it->second(*this, subject, args, line);
}

}  // namespace rlrun::engine::jinja
