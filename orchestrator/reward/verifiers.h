// verifiers.h - the rules that score one completion against its reference answer, with no I/O:
// numeric answers (GSM8K "#### N", \boxed{N}, the last number), exact first-line match, and
// PCRE2 patterns (task.reward_regex, task.format_regex).
//
// Completions are untrusted text (megabytes, invalid UTF-8, text built to make a pattern
// backtrack): every function here runs in time linear in the text, except pattern matching,
// which is bounded by PCRE2's match limits and a time budget (RegexLimits); a match that runs
// into a limit counts as no match and is logged (rate-limited).
//
// Threads: the functions are thread-safe; a RewardRegex or AnswerRegex is used by one thread at a
// time (it keeps its match data and, for AnswerRegex, a cache of compiled patterns). Both are
// move-only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/observe/log.h"
#include "common/status.h"

namespace rlrun::orchestrator {

// ---------------------------------------------------------------- numbers

// The number a text gives as its answer, normalized ("-1234.5", "72", "0.75"), or nullopt.
// Where it looks, first rule that applies wins:
//   1. GSM8K: the number right after the last "####" that has one ("#### 72", "####  -$1,200");
//      a "####" followed by anything else (a Markdown heading "#### Step 1") is not one;
//   2. the last number inside the last \boxed{...} (braces balanced); a box that holds no number
//      means no answer ("\boxed{\text{yes}}"); when the last "\boxed{" is never closed (a cut
//      completion), rule 3;
//   3. the last number in the text.
// A number: an optional sign ("-" or "+" not glued to a word or number before it: "3-4" is 3 and
// 4), an optional "$" (before or after the sign), digits with optional thousands separators
// ("1,234,567": groups of exactly three), an optional fraction part (".5", "3.25"; a "." not
// followed by a digit ends a sentence), or a fraction of integers "3/4", which becomes its decimal
// value (15 significant digits; "8/4" is "2"; "x/0" is not a fraction; parts of at most 18
// digits), as is \frac{3}{4} (also \dfrac, \tfrac). No exponents ("1e5" is 1 then 5), no decimal
// commas ("3,5" is 3 then 5).
// Normalized: no "+", no separators, no leading zeros, no trailing fraction zeros, "-0" is "0".
// A sign is "-", "+" or U+2212 (minus sign).
std::optional<std::string> numeric_answer(std::string_view text);

// Both texts have a numeric answer and they are equal: exactly when both are integers (a
// relative tolerance would accept 1234567 for 1234568), else within a relative tolerance of 1e-6
// (0.333333 for 1/3). `reference` may be a bare number or a whole GSM8K solution ending "#### 72".
bool numeric_match(std::string_view completion, std::string_view reference);

// The jsonl task's rule: extract_answer(completion) == extract_answer(reference) (first lines,
// trimmed).
bool exact_match(std::string_view completion, std::string_view reference);

// ---------------------------------------------------------------- patterns

// What one match may cost. PCRE2 counts match_limit and depth_limit per start position, so a
// text of megabytes could still take hours with a pattern that costs a little at each position:
// the match runs over windows of start positions and gives up once `budget` has passed (checked
// between windows; one window costs at most window_starts * match_limit steps).
struct RegexLimits {
  uint32_t match_limit = 1000000;    // backtracking steps per start position (PCRE2 default: 10M)
  uint32_t depth_limit = 10000;      // nested backtracking frames (interpreter only)
  uint32_t heap_limit_kib = 65536;   // backtracking memory (interpreter only)
  size_t window_starts = 64;         // start positions per pcre2_match call
  std::chrono::milliseconds budget{250};
};

// One compiled pattern: UTF-8, with Unicode character classes (\w, \d and \b know "é" and "٣", as
// in Python's re); invalid UTF-8 in a text never matches a character but is no error.
class RewardRegex {
 public:
  RewardRegex(RewardRegex&&) noexcept;
  RewardRegex& operator=(RewardRegex&&) noexcept;
  ~RewardRegex();

  // `key` names the setting in errors: "task.format_regex \"([0-9]\": PCRE2 error at offset 6:
  // missing closing parenthesis".
  static Result<RewardRegex> compile(std::string_view pattern, std::string_view key, RegexLimits limits = {});

  // Whether the pattern matches somewhere in `text`. A limit hit is no match (logged).
  bool matches(std::string_view text);

 private:
  struct Compiled;
  explicit RewardRegex(std::unique_ptr<Compiled> compiled);
  std::unique_ptr<Compiled> compiled_;
};

// task.reward_regex: a pattern in which "{answer}" stands for the reference answer, escaped so
// that it matches literally. Compiled per answer, the last kCacheSize kept.
class AnswerRegex {
 public:
  static constexpr size_t kCacheSize = 64;
  static constexpr std::string_view kPlaceholder = "{answer}";

  // Checks that the template compiles (errors name task.reward_regex; offsets are the template's).
  static Result<AnswerRegex> compile(std::string pattern, RegexLimits limits = {});

  // Whether the pattern, with `answer` in place of "{answer}", matches somewhere in `text`.
  // A pattern that does not compile for this answer (possible only where {answer} sits in an odd
  // place, e.g. a group name) is no match, logged.
  bool matches(std::string_view text, std::string_view answer);

 private:
  struct Cached {
    std::string answer;
    std::optional<RewardRegex> regex;  // nullopt: did not compile
    uint64_t last_used = 0;
  };
  AnswerRegex(std::string pattern, RegexLimits limits) : template_(std::move(pattern)), limits_(limits) {}
  Cached& for_answer(std::string_view answer);

  std::string template_;
  RegexLimits limits_;
  std::optional<RewardRegex> fixed_;  // the template has no {answer}
  std::vector<Cached> cache_;         // at most kCacheSize; the least recently used goes first
  uint64_t uses_ = 0;
  log::RateLimited compile_failures_{std::chrono::seconds(30)};
};

// `text` with every ASCII character that is not a letter or digit backslash-escaped: PCRE2 then
// matches it literally (also under (?x), where a bare space would be ignored).
std::string regex_escape(std::string_view text);

}  // namespace rlrun::orchestrator
