// jinja/text.cc - Python's str methods on UTF-8 (case mapping by utf8proc).
#include "engine/tokenizer/jinja/text.h"

#include <utf8proc.h>

#include "engine/tokenizer/internal.h"  // next_code_point, is_unicode_whitespace

namespace rlrun::engine::jinja {

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    next_code_point(s, &i);
    out.push_back(s.substr(at, i - at));
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) next_code_point(s, &i);
  return n;
}

void append_utf8(int32_t cp, std::string* out) {
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(cp, buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool py_isspace(int32_t cp) { return is_unicode_whitespace(cp) || (cp >= 0x1c && cp <= 0x1f); }

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<std::string_view> cps = code_points(s);
  std::vector<std::string_view> set;
  if (chars) set = code_points(*chars);
  auto strippable = [&](std::string_view cp) {
    if (!chars) {
      size_t i = 0;
      return py_isspace(next_code_point(cp, &i));
    }
    for (std::string_view c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  size_t begin = 0, end = cps.size();
  if (left) while (begin < end && strippable(cps[begin])) ++begin;
  if (right) while (end > begin && strippable(cps[end - 1])) --end;
  if (begin == end) return "";
  const char* b = cps[begin].data();
  const char* e = cps[end - 1].data() + cps[end - 1].size();
  return std::string(b, e);
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) return out;  // the caller reports "empty separator"
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size()) {
      size_t j = i;
      if (!py_isspace(next_code_point(s, &j))) break;
      i = j;
    }
  };
  skip_space();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.emplace_back(py_strip(s.substr(i), std::nullopt, false, true));
      return out;
    }
    size_t start = i;
    while (i < s.size()) {
      size_t j = i;
      if (py_isspace(next_code_point(s, &j))) break;
      i = j;
    }
    out.emplace_back(s.substr(start, i - start));
    skip_space();
  }
  return out;
}

namespace {

enum class Case { kUpper, kLower, kTitle };

void append_cased(std::string_view cp_bytes, Case c, std::string* out) {
  size_t i = 0;
  int32_t cp = next_code_point(cp_bytes, &i);
  if (cp < 0) { out->append(cp_bytes); return; }
  int32_t mapped = c == Case::kUpper ? utf8proc_toupper(cp) : c == Case::kLower ? utf8proc_tolower(cp)
                                                                                 : utf8proc_totitle(cp);
  append_utf8(mapped, out);
}

bool is_cased_letter(std::string_view cp_bytes) {
  size_t i = 0;
  int32_t cp = next_code_point(cp_bytes, &i);
  if (cp < 0) return false;
  auto cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

std::string map_case(std::string_view s, Case c) {
  std::string out;
  out.reserve(s.size());
  for (std::string_view cp : code_points(s)) append_cased(cp, c, &out);
  return out;
}

}  // namespace

std::string py_upper(std::string_view s) { return map_case(s, Case::kUpper); }
std::string py_lower(std::string_view s) { return map_case(s, Case::kLower); }

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (std::string_view cp : code_points(s)) {
    append_cased(cp, first ? Case::kTitle : Case::kLower, &out);
    first = false;
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (std::string_view cp : code_points(s)) {
    bool cased = is_cased_letter(cp);
    append_cased(cp, cased && !previous_cased ? Case::kTitle : Case::kLower, &out);
    previous_cased = cased;
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s({\[<]+)", s) if w)
  std::string out;
  bool word_start = true;
  for (std::string_view cp : code_points(s)) {
    size_t i = 0;
    int32_t c = next_code_point(cp, &i);
    bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    if (separator) {
      out.append(cp);
      word_start = true;
    } else {
      append_cased(cp, word_start ? Case::kUpper : Case::kLower, &out);
      word_start = false;
    }
  }
  return out;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    int64_t done = 0;
    for (std::string_view cp : code_points(s)) {
      if (count < 0 || done < count) { out.append(to); ++done; }
      out.append(cp);
    }
    if (count < 0 || done < count) out.append(to);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

}  // namespace rlrun::engine::jinja
