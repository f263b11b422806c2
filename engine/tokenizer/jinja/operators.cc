// jinja/operators.cc - Python's arithmetic, membership, slicing and iteration on template values.
#include <cmath>
#include <optional>

#include "common/html.h"
#include "engine/tokenizer/jinja/interpreter.h"
#include "engine/tokenizer/jinja/text.h"

namespace rlrun::engine::jinja {
namespace {

bool is_int(const Value& v) { return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Value::Kind::kBool ? v.boolean : v.integer; }
double as_float(const Value& v) { return v.kind == Value::Kind::kFloat ? v.real : static_cast<double>(as_int(v)); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b, int line) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                      type_name(b) + "'", line);
}

Value repeat(const Value& seq, int64_t times, const Interpreter& in, int line) {
  if (times <= 0) return seq.is_string() ? Value(std::string()) : Value(List{}, seq.tuple);
  if (seq.is_string()) {
    in.check_string(seq.str.size() * static_cast<uint64_t>(std::min<int64_t>(times, INT32_MAX)), line);
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str;
    return Value(std::move(out));
  }
  in.check_list(seq.list->size() * static_cast<uint64_t>(std::min<int64_t>(times, INT32_MAX)), line);
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value(std::move(out), seq.tuple);
}

// a op b on int64, or a TemplateError where Python's bigints would go past 64 bits.
template <class Op>
int64_t checked(Op op, int64_t a, int64_t b, int line) {
  int64_t r = 0;
  if (op(a, b, &r)) throw TemplateError("integer overflow (rlrun's template integers are 64-bit)", line);
  return r;
}
constexpr auto kAdd = [](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); };
constexpr auto kSub = [](int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); };
constexpr auto kMul = [](int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); };

Value int_pow(int64_t base, int64_t exp, int line) {
  if (exp < 0) return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  int64_t r = 1;
  while (exp > 0) {  // square and multiply; a squared base is always used, so its overflow is real
    if (exp & 1) r = checked(kMul, r, base, line);
    exp >>= 1;
    if (exp > 0) base = checked(kMul, base, base, line);
  }
  return Value(r);
}

// Python's printf-style `str % args` for %s %r %d %i and %%; other conversions are errors.
Value percent_format(const std::string& fmt, const Value& args, const Interpreter& in, int line) {
  const List values = args.is_list() && args.tuple ? *args.list : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') { out += fmt[i]; continue; }
    if (++i >= fmt.size()) throw TemplateError("incomplete format", line);
    const char c = fmt[i];
    if (c == '%') { out += '%'; continue; }
    if (c != 's' && c != 'r' && c != 'd' && c != 'i') {
      throw TemplateError(std::string("string formatting with %") + c + " is not supported", line);
    }
    if (next >= values.size()) throw TemplateError("not enough arguments for format string", line);
    const Value& v = values[next++];
    if ((c == 'd' || c == 'i') && !v.is_number()) {
      throw TemplateError("%" + std::string(1, c) + " format: a real number is required, not " + type_name(v), line);
    }
    out += c == 'r' ? repr(v)
           : c == 's' ? to_str(v)
                      : std::to_string(v.kind == Value::Kind::kFloat ? static_cast<int64_t>(v.real)
                                       : v.kind == Value::Kind::kBool ? int64_t{v.boolean} : v.integer);
    in.check_string(out.size(), line);
  }
  if (next < values.size()) throw TemplateError("not all arguments converted during string formatting", line);
  return Value(std::move(out));
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& in, int line) {
  if (op == "~") {
    std::string s = to_str(a);
    std::string t = to_str(b);
    in.check_string(s.size() + t.size(), line);
    return Value(s + t);
  }
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    throw TemplateError(u.str.empty() ? "undefined value in '" + op + "'" : u.str, line);
  }
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = is_int(a) && is_int(b);
  if (op == "+") {
    if (ints) return Value(checked(kAdd, as_int(a), as_int(b), line));
    if (numbers) return Value(as_float(a) + as_float(b));
    if (a.is_string() && b.is_string()) {
      in.check_string(a.str.size() + b.str.size(), line);
      if (!a.safe && !b.safe) return Value(a.str + b.str);
      Value out((a.safe ? a.str : html_escape(a.str)) + (b.safe ? b.str : html_escape(b.str)));
      out.safe = true;  // Markup + str escapes the str
      return out;
    }
    if (a.is_list() && b.is_list() && a.tuple == b.tuple && !a.generator && !b.generator) {
      in.check_list(a.list->size() + b.list->size(), line);
      List out(*a.list);
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value(std::move(out), a.tuple);
    }
    if (a.is_string()) throw TemplateError("can only concatenate str (not \"" + type_name(b) + "\") to str", line);
    unsupported(op, a, b, line);
  }
  if (op == "-") {
    if (ints) return Value(checked(kSub, as_int(a), as_int(b), line));
    if (numbers) return Value(as_float(a) - as_float(b));
    unsupported(op, a, b, line);
  }
  if (op == "*") {
    if (ints) return Value(checked(kMul, as_int(a), as_int(b), line));
    if (numbers) return Value(as_float(a) * as_float(b));
    if ((a.is_string() || a.is_list()) && is_int(b)) return repeat(a, as_int(b), in, line);
    if ((b.is_string() || b.is_list()) && is_int(a)) return repeat(b, as_int(a), in, line);
    unsupported(op, a, b, line);
  }
  if (op == "/") {
    if (!numbers) unsupported(op, a, b, line);
    if (as_float(b) == 0) throw TemplateError("division by zero", line);
    return Value(as_float(a) / as_float(b));
  }
  if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") return percent_format(a.str, b, in, line);
    if (!numbers) unsupported(op, a, b, line);
    if (as_float(b) == 0) throw TemplateError(op == "%" ? "modulo by zero" : "integer division or modulo by zero", line);
    if (ints) {
      int64_t x = as_int(a), y = as_int(b);
      if (x == INT64_MIN && y == -1) throw TemplateError("integer overflow", line);
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) { --q; r += y; }  // Python floors toward -infinity
      return Value(op == "//" ? q : r);
    }
    double x = as_float(a), y = as_float(b);
    double q = std::floor(x / y);
    if (op == "//") return Value(q);
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  if (op == "**") {
    if (ints) return int_pow(as_int(a), as_int(b), line);
    if (numbers) return Value(std::pow(as_float(a), as_float(b)));
    unsupported(op, a, b, line);
  }
  throw TemplateError("unknown operator '" + op + "'", line);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw TemplateError("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.str.find(item.str) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : *container.list) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict: case Value::Kind::kNamespace:
      if (!hashable(item)) throw TemplateError("unhashable type: '" + type_name(item) + "'");
      return container.dict->find(item) != nullptr;
    default:
      throw TemplateError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value slice(const Value& v, const Value& start, const Value& stop, const Value& step, int line) {
  if ((!v.is_list() && !v.is_string()) || v.generator) {
    if (v.is_undefined()) throw TemplateError(v.str.empty() ? "slice of an undefined value" : v.str, line);
    throw TemplateError("'" + type_name(v) + "' object is not subscriptable", line);
  }
  auto bound = [&](const Value& b, const char* what) -> std::optional<int64_t> {
    if (b.is_none()) return std::nullopt;
    if (!is_int(b)) throw TemplateError(std::string("slice ") + what + " must be an integer or none", line);
    return as_int(b);
  };
  std::vector<std::string_view> cps;
  if (v.is_string()) cps = code_points(v.str);
  const int64_t n = v.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(v.list->size());
  const int64_t s = bound(step, "step").value_or(1);
  if (s == 0) throw TemplateError("slice step cannot be zero", line);
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> b, int64_t fallback) {
    if (!b) return fallback;
    int64_t x = *b;
    if (x < 0) { x += n; if (x < 0) x = s < 0 ? -1 : 0; }
    else if (x >= n) x = s < 0 ? n - 1 : n;
    return x;
  };
  int64_t lo = adjust(bound(start, "start"), s < 0 ? n - 1 : 0);
  int64_t hi = adjust(bound(stop, "stop"), s < 0 ? -1 : n);
  std::string str;
  List list;
  for (int64_t i = lo; s > 0 ? i < hi : i > hi; i += s) {
    if (v.is_string()) str.append(cps[static_cast<size_t>(i)]);
    else list.push_back((*v.list)[static_cast<size_t>(i)]);
  }
  if (v.is_string()) return Value(std::move(str));
  return Value(std::move(list), v.tuple);
}

List iterate(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return *v.list;
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, e] : v.dict->items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (std::string_view cp : code_points(v.str)) chars.emplace_back(std::string(cp));
      return chars;
    }
    default: throw TemplateError("'" + type_name(v) + "' object is not iterable", line);
  }
}

}  // namespace rlrun::engine::jinja
