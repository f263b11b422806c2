// Parsing and formatting of single config values: strict types, ranges, enum spellings.
#include <charconv>
#include <cmath>
#include <vector>

#include "common/config/schema.h"
#include "common/observe/log.h"

namespace rlrun {
namespace {

// A number as it reads best in a message: integral values without a fraction.
std::string number_text(double x) {
  if (std::isfinite(x) && std::floor(x) == x && std::fabs(x) < 1e15) {
    return std::to_string(static_cast<int64_t>(x));
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The value as the user wrote it, for messages (long values cut).
std::string shown(std::string_view text) {
  if (text.size() > 60) return quoted(std::string(text.substr(0, 57)) + "...");
  std::string out(1, '`');  // appends, not operator+: GCC 12 warns falsely (-Wrestrict) on that
  out.append(text);
  out += '`';
  return out;
}

std::string choices_text(std::string_view choices) {
  std::string out;
  for (int i = 0;; ++i) {
    const std::string_view c = nth_choice(choices, i);
    if (c.empty()) break;
    if (!out.empty()) out += ", ";
    out += c;
  }
  return out;
}

bool parse_int(std::string_view text, int64_t* out) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

bool parse_float(std::string_view text, double* out) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size() &&
         std::isfinite(*out);
}

Status out_of_range(const KeySpec& key, std::string_view text) {
  return invalid_argument(str("`", key.dotted_name(), "` = ", text, " is out of range: allowed ",
                              key.bounds.describe()));
}

}  // namespace

bool Bounds::contains(double x) const {
  if (lo_open ? !(x > lo) : !(x >= lo)) return false;
  if (hi_open ? !(x < hi) : !(x <= hi)) return false;
  return true;
}

bool Bounds::is_path_value(std::string_view value) const {
  if (value.empty()) return false;
  for (size_t at = 0; at <= words.size();) {
    const size_t bar = std::min(words.find('|', at), words.size());
    if (!words.empty() && words.substr(at, bar - at) == value) return false;
    at = bar + 1;
  }
  return true;
}

std::string Bounds::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) {
    return str(lo_open ? "(" : "[", number_text(lo), ", ", number_text(hi), hi_open ? ")" : "]");
  }
  if (has_lo) return str(lo_open ? "> " : ">= ", number_text(lo));
  if (has_hi) return str(hi_open ? "< " : "<= ", number_text(hi));
  return "any";
}

Result<ConfigValue> parse_config_value(const KeySpec& key, std::string_view text) {
  const std::string name = key.dotted_name();
  switch (key.type) {
    case ValueType::kInt: {
      int64_t v = 0;
      if (!parse_int(text, &v)) {
        double approx = 0;  // an integer too large for int64 is out of range, not malformed
        if (text.find_first_of(".eE") == std::string_view::npos && parse_float(text, &approx)) {
          return out_of_range(key, text);
        }
        return invalid_argument(str("`", name, "` expects an integer, got ", shown(text)));
      }
      if (!key.bounds.contains(static_cast<double>(v))) return out_of_range(key, text);
      return ConfigValue(v);
    }
    case ValueType::kFloat: {
      double v = 0;
      if (!parse_float(text, &v)) {
        return invalid_argument(str("`", name, "` expects a number, got ", shown(text)));
      }
      if (!key.bounds.contains(v)) return out_of_range(key, text);
      return ConfigValue(v);
    }
    case ValueType::kBool:
      if (text == "true" || text == "True" || text == "TRUE") return ConfigValue(true);
      if (text == "false" || text == "False" || text == "FALSE") return ConfigValue(false);
      return invalid_argument(str("`", name, "` expects true or false, got ", shown(text)));
    case ValueType::kString:
      return ConfigValue(std::string(text));
    case ValueType::kEnum: {
      std::vector<std::string_view> choices;
      for (int i = 0; !nth_choice(key.choices, i).empty(); ++i) {
        choices.push_back(nth_choice(key.choices, i));
        if (choices.back() == text) return ConfigValue(std::string(text));
      }
      std::string message = str("`", name, "` = ", shown(text), " is not one of: ",
                                choices_text(key.choices));
      const std::string_view best = closest_name(text, choices);
      if (!best.empty()) message += str(" (did you mean `", best, "`?)");
      return invalid_argument(message);
    }
  }
  return internal_error("unknown value type");
}

std::string format_config_value(const KeySpec& key, const ConfigValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* d = std::get_if<double>(&value)) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, *d);  // shortest round-trip form
    std::string text = ec == std::errc() ? std::string(buf, end) : std::to_string(*d);
    if (text.find_first_of(".e") == std::string::npos) text += ".0";
    return text;
  }
  const std::string& s = std::get<std::string>(value);
  return key.type == ValueType::kEnum ? s : quoted(s);
}

}  // namespace rlrun
