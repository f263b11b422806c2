#include "orchestrator/reward/verifiers.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/check.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

// ---------------------------------------------------------------- numbers

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// One number as written, before normalization. Views into the text.
struct NumberToken {
  bool negative = false;
  std::string_view integer;   // digits, maybe with "," separators; empty for ".5"
  std::string_view fraction;  // digits after the "."
  std::string_view numerator, denominator;  // a fraction "3/4" or \frac{3}{4} (then integer is empty)
  size_t end = 0;             // one past the last character
};

size_t digits_from(std::string_view t, size_t i) {
  while (i < t.size() && is_digit(t[i])) ++i;
  return i;
}

// A fraction's parts have at most this many digits (its value is then finite and exact enough).
constexpr size_t kMaxFractionDigits = 18;

// \frac{A}{B}, \dfrac{A}{B}, \tfrac{A}{B} at i (the backslash), A and B unsigned integers.
std::optional<NumberToken> latex_fraction_at(std::string_view t, size_t i) {
  size_t j = i + 1;
  for (std::string_view name : {"frac{", "dfrac{", "tfrac{"}) {
    if (t.substr(j, name.size()) == name) {
      j += name.size();
      const size_t num_end = digits_from(t, j);
      if (num_end == j || t.substr(num_end, 2) != "}{") return std::nullopt;
      const size_t den_end = digits_from(t, num_end + 2);
      if (den_end == num_end + 2 || den_end >= t.size() || t[den_end] != '}') return std::nullopt;
      NumberToken n;
      n.numerator = t.substr(j, num_end - j);
      n.denominator = t.substr(num_end + 2, den_end - num_end - 2);
      if (n.numerator.size() > kMaxFractionDigits || n.denominator.size() > kMaxFractionDigits ||
          n.denominator.find_first_not_of('0') == std::string_view::npos)
        return std::nullopt;
      n.end = den_end + 1;
      return n;
    }
  }
  return std::nullopt;
}

// An unsigned number starting at i (a digit, a "." before a digit, or a backslash).
std::optional<NumberToken> unsigned_number_at(std::string_view t, size_t i) {
  if (t[i] == '\\') return latex_fraction_at(t, i);
  NumberToken n;
  size_t j = digits_from(t, i);
  bool separated = false;
  // "1,234,567": a first group of 1-3 digits, then groups of exactly three.
  if (j - i >= 1 && j - i <= 3) {
    while (j + 3 < t.size() && t[j] == ',' && is_digit(t[j + 1]) && is_digit(t[j + 2]) && is_digit(t[j + 3]) &&
           (j + 4 == t.size() || !is_digit(t[j + 4]))) {
      j += 4;
      separated = true;
    }
  }
  n.integer = t.substr(i, j - i);
  if (j + 1 < t.size() && t[j] == '.' && is_digit(t[j + 1])) {
    const size_t frac_end = digits_from(t, j + 1);
    n.fraction = t.substr(j + 1, frac_end - j - 1);
    j = frac_end;
  } else if (!separated && !n.integer.empty() && j + 1 < t.size() && t[j] == '/' && is_digit(t[j + 1])) {
    const size_t den_end = digits_from(t, j + 1);
    const std::string_view den = t.substr(j + 1, den_end - j - 1);
    if (den.find_first_not_of('0') != std::string_view::npos && n.integer.size() <= kMaxFractionDigits &&
        den.size() <= kMaxFractionDigits) {
      n.numerator = n.integer;
      n.denominator = den;
      n.integer = {};
      j = den_end;
    }
  }
  if (n.integer.empty() && n.fraction.empty() && n.numerator.empty()) return std::nullopt;
  n.end = j;
  return n;
}

// Whether the number starting at i has a sign before it (past an optional "$"), and the sign is
// not glued to a word or number ("3-4").
bool negative_before(std::string_view t, size_t i) {
  size_t k = i;
  if (k > 0 && t[k - 1] == '$') --k;
  size_t sign_start = k;
  bool minus = false;
  if (k > 0 && (t[k - 1] == '-' || t[k - 1] == '+')) {
    sign_start = k - 1;
    minus = t[k - 1] == '-';
  } else if (k >= 3 && t.substr(k - 3, 3) == "\xE2\x88\x92") {  // U+2212
    sign_start = k - 3;
    minus = true;
  } else {
    return false;
  }
  if (sign_start == 0) return minus;
  const char before = t[sign_start - 1];
  return minus && !is_alnum(before) && before != '.' && before != ')' && before != ']' && before != '}';
}

bool starts_number(std::string_view t, size_t i) {
  const char c = t[i];
  if (is_digit(c)) return true;
  if (c == '.') return i + 1 < t.size() && is_digit(t[i + 1]) && (i == 0 || (!is_digit(t[i - 1]) && t[i - 1] != '.'));
  return c == '\\';
}

std::optional<NumberToken> number_at(std::string_view t, size_t i) {
  std::optional<NumberToken> n = unsigned_number_at(t, i);
  if (n) n->negative = negative_before(t, i);
  return n;
}

// The last number in t. Linear: every character is looked at a bounded number of times.
std::optional<NumberToken> last_number(std::string_view t) {
  std::optional<NumberToken> last;
  size_t i = 0;
  while (i < t.size()) {
    if (starts_number(t, i)) {
      if (std::optional<NumberToken> n = number_at(t, i)) {
        i = n->end;
        last = n;
        continue;
      }
    }
    ++i;
  }
  return last;
}

std::string normalize(const NumberToken& n) {
  if (!n.numerator.empty()) {
    const double value = std::strtod(std::string(n.numerator).c_str(), nullptr) /
                         std::strtod(std::string(n.denominator).c_str(), nullptr);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.15g", n.negative && value != 0 ? -value : value);
    return buf;
  }
  std::string_view integer = n.integer, fraction = n.fraction;
  while (!integer.empty() && (integer.front() == '0' || integer.front() == ',')) integer.remove_prefix(1);
  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
  const bool zero = integer.empty() && fraction.empty();
  std::string text = n.negative && !zero ? "-" : "";
  if (integer.empty()) text += '0';
  for (char c : integer)
    if (c != ',') text += c;
  if (!fraction.empty()) text.append(".").append(fraction);
  return text;
}

// "#### N": the number right after the last "####" that has one.
std::optional<NumberToken> gsm8k_answer(std::string_view t) {
  size_t at = t.size();
  while (at > 0 && (at = t.rfind("####", at - 1)) != std::string_view::npos) {
    size_t i = at + 4;
    while (i < t.size() && (t[i] == ' ' || t[i] == '\t')) ++i;
    if (i < t.size() && t[i] == '$') ++i;
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
    else if (t.substr(i, 3) == "\xE2\x88\x92") i += 3;
    if (i < t.size() && t[i] == '$') ++i;
    if (i < t.size() && starts_number(t, i))
      if (std::optional<NumberToken> n = number_at(t, i)) return n;
  }
  return std::nullopt;
}

// The content of the last \boxed{...}, or nullopt when there is none or it is never closed.
std::optional<std::string_view> last_boxed(std::string_view t) {
  constexpr std::string_view kBoxed = "\\boxed{";
  const size_t at = t.rfind(kBoxed);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t begin = at + kBoxed.size();
  int64_t depth = 1;
  for (size_t i = begin; i < t.size(); ++i) {
    if (t[i] == '{') ++depth;
    if (t[i] == '}' && --depth == 0) return t.substr(begin, i - begin);
  }
  return std::nullopt;
}

bool is_integer_text(std::string_view s) {
  if (!s.empty() && s[0] == '-') s.remove_prefix(1);
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

}  // namespace

std::optional<std::string> numeric_answer(std::string_view text) {
  std::optional<NumberToken> n = gsm8k_answer(text);
  if (!n) {
    if (std::optional<std::string_view> boxed = last_boxed(text)) {
      // Views into `boxed` are views into `text`: the token stays valid.
      n = last_number(*boxed);
      if (!n) return std::nullopt;
    } else {
      n = last_number(text);
    }
  }
  if (!n) return std::nullopt;
  return normalize(*n);
}

bool numeric_match(std::string_view completion, std::string_view reference) {
  const std::optional<std::string> got = numeric_answer(completion), want = numeric_answer(reference);
  if (!got || !want) return false;
  if (is_integer_text(*got) && is_integer_text(*want)) return *got == *want;
  const double a = std::strtod(got->c_str(), nullptr), b = std::strtod(want->c_str(), nullptr);
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= 1e-6 * std::max(std::fabs(a), std::fabs(b));
}

bool exact_match(std::string_view completion, std::string_view reference) {
  return extract_answer(completion) == extract_answer(reference);
}

// ---------------------------------------------------------------- patterns

struct RewardRegex::Compiled {
  std::string key;
  RegexLimits limits;
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_match_data* match_data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  log::RateLimited limit_hits{std::chrono::seconds(30)};

  ~Compiled() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

RewardRegex::RewardRegex(std::unique_ptr<Compiled> compiled) : compiled_(std::move(compiled)) {}
RewardRegex::RewardRegex(RewardRegex&&) noexcept = default;
RewardRegex& RewardRegex::operator=(RewardRegex&&) noexcept = default;
RewardRegex::~RewardRegex() = default;

namespace {

std::string pcre2_message(int error) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(error, message, sizeof message);
  return reinterpret_cast<const char*>(message);
}

}  // namespace

Result<RewardRegex> RewardRegex::compile(std::string_view pattern, std::string_view key, RegexLimits limits) {
  auto c = std::make_unique<Compiled>();
  c->key = key;
  c->limits = limits;
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UTF-8 with invalid sequences allowed in the text, Unicode \w \d \b (as Python's re); \C (one
  // byte of a character) refused.
  const uint32_t options =
      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C | PCRE2_USE_OFFSET_LIMIT;
  c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                          nullptr);
  if (c->code == nullptr)
    return invalid_argument(str(key, " \"", pattern, "\": PCRE2 error at offset ", offset, ": ", pcre2_message(error),
                                "; fix the pattern (PCRE2 syntax, as in Perl)"));
  c->context = pcre2_match_context_create(nullptr);
  c->match_data = pcre2_match_data_create(1, nullptr);  // only whether it matches is read
  RLRUN_CHECK(c->context != nullptr && c->match_data != nullptr, "PCRE2 out of memory");
  pcre2_set_match_limit(c->context, limits.match_limit);
  pcre2_set_depth_limit(c->context, limits.depth_limit);
  pcre2_set_heap_limit(c->context, limits.heap_limit_kib);
  // JIT is optional (the interpreter gives the same answers); its stack bounds its recursion.
  if (pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE) == 0) {
    c->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
    if (c->jit_stack != nullptr) pcre2_jit_stack_assign(c->context, nullptr, c->jit_stack);
  }
  return RewardRegex(std::move(c));
}

bool RewardRegex::matches(std::string_view text) {
  Compiled& c = *compiled_;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const auto deadline = std::chrono::steady_clock::now() + c.limits.budget;
  const size_t window = std::max<size_t>(1, c.limits.window_starts);
  size_t start = 0;
  while (true) {
    pcre2_set_offset_limit(c.context, start + window - 1);  // the last start position tried
    const int rc = pcre2_match(c.code, subject, text.size(), start, 0, c.match_data, c.context);
    if (rc >= 0) return true;
    std::string why;
    if (rc != PCRE2_ERROR_NOMATCH) {
      why = pcre2_message(rc);
    } else if (start + window - 1 >= text.size()) {
      return false;
    } else if (std::chrono::steady_clock::now() > deadline) {
      why = str("it took longer than ", c.limits.budget.count(), " ms");
    } else {
      start += window;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    c.limit_hits.write(log::Level::kWarn, str(c.key, ": gave up matching a text of ", text.size(), " bytes (", why,
                                              "); counted as no match"));
    return false;
  }
}

std::string regex_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) {
    if (c == '\0') {
      out += "\\x00";
    } else {
      if (static_cast<unsigned char>(c) < 0x80 && !is_alnum(c)) out += '\\';
      out += c;
    }
  }
  return out;
}

namespace {

std::string replace_placeholder(std::string_view pattern, std::string_view with) {
  std::string out;
  size_t i = 0;
  for (size_t at; (at = pattern.find(AnswerRegex::kPlaceholder, i)) != std::string_view::npos;
       i = at + AnswerRegex::kPlaceholder.size()) {
    out.append(pattern.substr(i, at - i));
    out.append(with);
  }
  out.append(pattern.substr(i));
  return out;
}

}  // namespace

Result<AnswerRegex> AnswerRegex::compile(std::string pattern, RegexLimits limits) {
  constexpr std::string_view kKey = "task.reward_regex";
  AnswerRegex regex(std::move(pattern), limits);
  if (regex.template_.find(kPlaceholder) == std::string::npos) {
    RLRUN_ASSIGN_OR_RETURN(RewardRegex fixed, RewardRegex::compile(regex.template_, kKey, limits));
    regex.fixed_ = std::move(fixed);
    return regex;
  }
  // A stand-in as long as "{answer}", so that an error's offset is the template's.
  static_assert(std::string_view("(?:0000)").size() == kPlaceholder.size());
  const Result<RewardRegex> check =
      RewardRegex::compile(replace_placeholder(regex.template_, "(?:0000)"), kKey, limits);
  if (!check.ok()) {
    // Name the template, not the stand-in.
    const std::string& m = check.status().message();
    const size_t after = m.find("\": PCRE2 error");
    return invalid_argument(str(kKey, " \"", regex.template_, m.substr(after)));
  }
  return regex;
}

AnswerRegex::Cached& AnswerRegex::for_answer(std::string_view answer) {
  ++uses_;
  for (Cached& c : cache_) {
    if (c.answer == answer) {
      c.last_used = uses_;
      return c;
    }
  }
  Cached fresh{std::string(answer), std::nullopt, uses_};
  Result<RewardRegex> compiled =
      RewardRegex::compile(replace_placeholder(template_, regex_escape(answer)), "task.reward_regex", limits_);
  if (compiled.ok()) {
    fresh.regex = std::move(compiled).value();
  } else {
    compile_failures_.write(log::Level::kWarn, str("with the answer \"", answer.substr(0, 60), "\" in place of ",
                                                   kPlaceholder, ", ", compiled.status().message(),
                                                   "; counted as no match"));
  }
  if (cache_.size() < kCacheSize) {
    cache_.push_back(std::move(fresh));
    return cache_.back();
  }
  Cached& oldest = *std::min_element(cache_.begin(), cache_.end(),
                                     [](const Cached& a, const Cached& b) { return a.last_used < b.last_used; });
  oldest = std::move(fresh);
  return oldest;
}

bool AnswerRegex::matches(std::string_view text, std::string_view answer) {
  if (fixed_) return fixed_->matches(text);
  Cached& c = for_answer(answer);
  return c.regex && c.regex->matches(text);
}

}  // namespace rlrun::orchestrator
