// jinja/value.cc - Python's printing, comparison and truth of template values, and json.dumps.
#include "engine/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/tokenizer/internal.h"  // next_code_point

namespace rlrun::engine::jinja {

namespace {

int checked_depth(int depth) {
  if (depth > kMaxNesting) {
    throw limit_error("lists and dicts nested more than " + std::to_string(kMaxNesting) + " deep", 0);
  }
  return depth;
}

}  // namespace

int nesting(const Value& v) {
  if (v.kind == Value::Kind::kList) return v.depth;
  if (v.kind == Value::Kind::kDict || v.kind == Value::Kind::kNamespace) return v.dict->depth;
  return 0;
}

Value::Value(List l, bool is_tuple) : kind(Kind::kList), tuple(is_tuple) {
  int deepest = 0;
  for (const Value& e : l) deepest = std::max(deepest, nesting(e));
  depth = checked_depth(deepest + 1);
  list = std::make_shared<const List>(std::move(l));
}

Value::Value(std::shared_ptr<Dict> d, Kind k) : kind(k), dict(std::move(d)) {
  int deepest = 0;
  for (const auto& [key, e] : dict->items) deepest = std::max(deepest, nesting(e));
  dict->depth = std::max(dict->depth, checked_depth(deepest + 1));
}
Value::Value(std::shared_ptr<Function> f) : kind(Kind::kFunction), function(std::move(f)) {}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, v] : j.items()) d->items.emplace_back(k, from_json(v));
      return Value(std::move(d));
    }
    default: return Value();
  }
}

const Value* Dict::find_str(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.kind == Value::Kind::kString && k.str == key) return &v;
  }
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(const Value& key, Value value) {
  depth = std::max(depth, checked_depth(nesting(value) + 1));
  for (auto& [k, v] : items) {
    if (equals(k, key)) { v = std::move(value); return; }
  }
  items.emplace_back(key, std::move(value));
}

bool hashable(const Value& key) {
  return key.is_string() || key.is_number() || key.is_none();
}

Value CallArgs::get(size_t index, std::string_view name, const Value& fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return fallback;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.boolean;
    case Value::Kind::kInt: return v.integer != 0;
    case Value::Kind::kFloat: return v.real != 0;
    case Value::Kind::kString: return !v.str.empty();
    case Value::Kind::kList: return v.generator || !v.list->empty();
    case Value::Kind::kDict: return !v.dict->items.empty();
    default: return true;
  }
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits in scientific form: "d.ddde±x".
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, end);
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  } else if (exponent < 0) {
    out = "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
  } else {
    if (digits.size() <= static_cast<size_t>(exponent) + 1) digits.append(exponent + 1 - digits.size(), '0');
    out = digits.substr(0, exponent + 1) + ".";
    std::string frac = digits.substr(exponent + 1);
    out += frac.empty() ? "0" : frac;
  }
  return negative ? "-" + out : out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    int32_t cp = next_code_point(s, &i);
    char buf[16];
    if (cp == quote || cp == '\\') { out += '\\'; out += static_cast<char>(cp); }
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if ((cp >= 0 && cp < 0x20) || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      out += buf;
    } else {
      out.append(s, at, i - at);
    }
  }
  return out + quote;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: return repr_string(v.str);
    case Value::Kind::kList: {
      if (v.generator) return "<generator object>";
      std::string out = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += ", ";
        out += repr((*v.list)[i]);
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      // A namespace can hold itself: Python prints the inner occurrence as {...}.
      thread_local std::vector<const Dict*> printing;
      if (std::find(printing.begin(), printing.end(), v.dict.get()) != printing.end()) return "{...}";
      printing.push_back(v.dict.get());
      struct Pop {
        ~Pop() { printing.pop_back(); }
      } pop;
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(e);
      }
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.boolean ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.integer);
    case Value::Kind::kFloat: return float_repr(v.real);
    case Value::Kind::kString: return v.str;
    case Value::Kind::kList: case Value::Kind::kDict: return repr(v);
    case Value::Kind::kNamespace: {
      Value as_dict(v.dict);
      return "<Namespace " + repr(as_dict) + ">";
    }
    case Value::Kind::kFunction: return "<function " + v.function->name + ">";
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.generator ? "generator" : v.tuple ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

namespace {

double as_double(const Value& v) {
  if (v.kind == Value::Kind::kFloat) return v.real;
  if (v.kind == Value::Kind::kBool) return v.boolean ? 1 : 0;
  return static_cast<double>(v.integer);
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      auto ai = a.kind == Value::Kind::kBool ? int64_t{a.boolean} : a.integer;
      auto bi = b.kind == Value::Kind::kBool ? int64_t{b.boolean} : b.integer;
      return ai == bi;
    }
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str == b.str;
    case Value::Kind::kList: {
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;  // [1] != (1,)
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!equals((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return a.dict == b.dict;
    case Value::Kind::kFunction: return a.function == b.function;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kInt && b.kind == Value::Kind::kInt) return a.integer < b.integer;
    return as_double(a) < as_double(b);
  }
  if (a.is_string() && b.is_string()) return a.str < b.str;  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list()) {
    const List &x = *a.list, &y = *b.list;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError("'<' not supported between instances of '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (ensure_ascii && c >= 0x80) {
      int32_t cp = next_code_point(s, &i);
      if (cp < 0) cp = 0xFFFD;
      char buf[16];
      if (cp > 0xFFFF) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
      continue;
    }
    ++i;
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void json_value(const Value& v, const JsonStyle& style, int depth, std::string* out) {
  if (depth > 512) throw TemplateError("tojson: value nested too deeply");
  const bool pretty = style.indent >= 0;
  const std::string item_sep = !style.item_separator.empty() ? style.item_separator : (pretty ? "," : ", ");
  const std::string key_sep = !style.key_separator.empty() ? style.key_separator : ": ";
  auto newline = [&](int level) {
    if (!pretty) return;
    *out += '\n';
    out->append(static_cast<size_t>(style.indent) * static_cast<size_t>(level), ' ');
  };
  switch (v.kind) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.boolean ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.integer); return;
    case Value::Kind::kFloat:
      if (std::isnan(v.real)) *out += "NaN";
      else if (std::isinf(v.real)) *out += v.real > 0 ? "Infinity" : "-Infinity";
      else *out += float_repr(v.real);
      return;
    case Value::Kind::kString: json_string(v.str, style.ensure_ascii, out); return;
    case Value::Kind::kList: {
      if (v.generator) throw TemplateError("Object of type generator is not JSON serializable");
      if (v.list->empty()) { *out += "[]"; return; }
      *out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        json_value((*v.list)[i], style, depth + 1, out);
      }
      newline(depth);
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict->items.empty()) { *out += "{}"; return; }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& item : v.dict->items) items.push_back(&item);
      if (style.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return less(a->first, b->first); });
      }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        const Value& key = items[i]->first;  // json.dumps turns 1 into "1", True into "true"
        const std::string key_text = key.is_string() ? key.str
                                     : key.is_none() ? "null"
                                     : key.kind == Value::Kind::kBool ? (key.boolean ? "true" : "false")
                                     : to_str(key);
        json_string(key_text, style.ensure_ascii, out);
        *out += key_sep;
        json_value(items[i]->second, style, depth + 1, out);
      }
      newline(depth);
      *out += '}';
      return;
    }
    default:
      throw TemplateError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(v, style, 0, &out);
  return out;
}

}  // namespace rlrun::engine::jinja
