// tokenizer/text.cc - the text stages of encoding: UTF-8 helpers, normalization (utf8proc),
// regex splitting (PCRE2) with HF's split behaviours, and the ByteLevel pre-tokenizer.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/observe/log.h"
#include "engine/tokenizer/internal.h"

namespace rlrun::engine {

// ---------------------------------------------------------------- UTF-8

int32_t next_code_point(std::string_view text, size_t* i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size(), at = *i;
  unsigned char b0 = s[at];
  if (b0 < 0x80) { *i = at + 1; return b0; }
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // valid range of the second byte (Unicode table 3-7)
  int32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) { len = 2; cp = b0 & 0x1F; }
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3; cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4; cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else { *i = at + 1; return -1; }
  for (int k = 1; k < len; ++k) {
    if (at + k >= n) { *i = at + k; return -1; }
    unsigned char b = s[at + k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) { *i = at + k; return -1; }
    cp = (cp << 6) | (b & 0x3F);
  }
  *i = at + len;
  return cp;
}

int32_t last_code_point(std::string_view text, size_t end) {
  if (end == 0) return -1;
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
    --start;
  }
  size_t i = start;
  int32_t cp = next_code_point(text, &i);
  return i == end ? cp : -1;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t start = i;
    if (next_code_point(bytes, &i) >= 0) {
      out.append(bytes.data() + start, i - start);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal invalid subsequence [start, i)
    }
  }
  return out;
}

bool is_unicode_whitespace(int32_t cp) {  // the Unicode White_Space property (Rust is_whitespace)
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_word_char(int32_t cp) {
  if (cp < 0) return false;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------- normalization

namespace {

int utf8proc_options(NormalizerKind kind) {
  switch (kind) {
    case NormalizerKind::kNFC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case NormalizerKind::kNFD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case NormalizerKind::kNFKC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case NormalizerKind::kNFKD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    default: break;
  }
  return 0;
}

// Normalizes one valid UTF-8 run (utf8proc rejects invalid input, hence the runs).
void normalize_run(std::string_view run, int options, std::string* out) {
  if (run.empty()) return;
  utf8proc_uint8_t* dest = nullptr;
  utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                      static_cast<utf8proc_ssize_t>(run.size()), &dest,
                                      static_cast<utf8proc_option_t>(options));
  if (len < 0) {
    out->append(run);  // cannot happen for valid UTF-8 (out of memory): keep the text as is
  } else {
    out->append(reinterpret_cast<const char*>(dest), static_cast<size_t>(len));
  }
  std::free(dest);
}

}  // namespace

namespace {

// Applies one Unicode normalization form (utf8proc options) around invalid UTF-8 runs.
std::string normalize_form(const std::string& current, int options) {
  std::string out;
  out.reserve(current.size());
  size_t run_start = 0, i = 0;
  while (i < current.size()) {
    size_t at = i;
    if (next_code_point(current, &i) >= 0) continue;
    normalize_run(std::string_view(current).substr(run_start, at - run_start), options, &out);
    out.append(current, at, i - at);  // invalid bytes pass through untouched
    run_start = i;
  }
  normalize_run(std::string_view(current).substr(run_start), options, &out);
  return out;
}

// Every non-overlapping occurrence of `pattern`, left to right (HF Replace with a String pattern).
std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(pattern, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(text.substr(pos));
  return out;
}

std::string strip_whitespace(const std::string& text, bool left, bool right) {
  size_t start = 0, end = text.size();
  while (left && start < end) {
    size_t next = start;
    if (!is_unicode_whitespace(next_code_point(text, &next))) break;
    start = next;
  }
  while (right && end > start && is_unicode_whitespace(last_code_point(text, end))) {
    do --end; while (end > start && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80);
  }
  return text.substr(start, end - start);
}

}  // namespace

std::string replace_literal(std::string_view text, std::string_view pattern, std::string_view content) {
  return replace_all(text, pattern, content);
}

// Whether a Replace of `pattern` by `content` moves the first char of `text` off the text's first
// original char: HF aligns the chars replacing a multi-char match with the match's last char, and a
// deletion leaves the next char first.
bool replace_moves_start(std::string_view text, const NormalizerStep& step) {
  if (text.substr(0, step.text.size()) != step.text) return false;
  size_t i = 0;
  next_code_point(step.text, &i);
  return i < step.text.size() || step.content.empty();
}

std::string normalize(std::string_view text, const std::vector<NormalizerStep>& steps, bool* starts_at_origin) {
  std::string current(text);
  for (const NormalizerStep& step : steps) {
    if (starts_at_origin != nullptr && !current.empty()) {
      if (step.kind == NormalizerKind::kReplace && replace_moves_start(current, step)) *starts_at_origin = false;
      size_t i = 0;
      if (step.kind == NormalizerKind::kStrip && step.strip_left && is_unicode_whitespace(next_code_point(current, &i))) {
        *starts_at_origin = false;
      }
    }
    switch (step.kind) {
      case NormalizerKind::kNFC: case NormalizerKind::kNFD: case NormalizerKind::kNFKC: case NormalizerKind::kNFKD:
        current = normalize_form(current, utf8proc_options(step.kind));
        break;
      case NormalizerKind::kPrepend:
        if (!current.empty()) current.insert(0, step.text);
        break;
      case NormalizerKind::kReplace:
        current = replace_all(current, step.text, step.content);
        break;
      case NormalizerKind::kStrip:
        current = strip_whitespace(current, step.strip_left, step.strip_right);
        break;
    }
  }
  return current;
}

// ---------------------------------------------------------------- regex

Result<Regex> Regex::compile(const std::string& pattern, bool literal) {
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  options |= literal ? PCRE2_LITERAL : PCRE2_UCP;
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument(str("regex `", pattern, "` does not compile at offset ", offset, ": ",
                                reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // failure is fine: the interpreter still works
  Regex regex;
  regex.code_ = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
  return regex;
}

void Regex::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>* out) const {
  // One ovector pair suffices (only the whole match is read); one per thread, made once.
  thread_local std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match_data(
      pcre2_match_data_create(1, nullptr), pcre2_match_data_free);
  auto* code = static_cast<const pcre2_code*>(code_.get());
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start < subject.size()) {
    int rc = pcre2_match(code, subj, subject.size(), start, 0, match_data.get(), nullptr);
    if (rc < 0) {
      // A resource limit (never seen with these patterns) leaves the rest as one unmatched piece:
      // the text still round-trips, but say so, as the tokens may differ from HF's.
      if (rc != PCRE2_ERROR_NOMATCH) log::warn(str("tokenizer regex: PCRE2 error ", rc, " at byte ", start));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_data.get());
    size_t s = ov[0], e = ov[1];
    if (e <= s) {  // empty match: step over one character and search again
      size_t next = s;
      next_code_point(subject, &next);
      start = next;
      continue;
    }
    out->emplace_back(s, e);
    start = e;
  }
}

// ---------------------------------------------------------------- split behaviours

namespace {

struct Span {
  size_t start, end;
  bool is_match;
};

// Matches and the gaps between them, in order, as HF's Pattern::find_matches gives them.
void matches_and_gaps(const Regex& regex, std::string_view text, bool invert, std::vector<Span>* spans) {
  std::vector<std::pair<size_t, size_t>> matches;
  regex.find_all(text, &matches);
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) spans->push_back({prev, s, invert});
    spans->push_back({s, e, !invert});
    prev = e;
  }
  if (prev != text.size()) spans->push_back({prev, text.size(), invert});
}

}  // namespace

void split_pieces(const SplitStep& step, std::string_view text, std::vector<std::string_view>* out) {
  std::vector<Span> spans, merged;
  matches_and_gaps(step.regex, text, step.invert, &spans);
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) if (!s.is_match) merged.push_back(s);
      break;
    case SplitBehavior::kIsolated:
      merged.swap(spans);
      break;
    case SplitBehavior::kMergedWithPrevious:  // a match joins the piece before it
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !merged.empty()) merged.back().end = s.end;
        else merged.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:  // a match joins the piece after it
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !previous_match && !merged.empty()) merged.back().start = s.start;
        else merged.push_back(s);
        previous_match = s.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case SplitBehavior::kContiguous:  // runs of matches, and runs of non-matches
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !merged.empty()) merged.back().end = s.end;
        else merged.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  for (const Span& s : merged) {
    if (s.end > s.start) out->push_back(text.substr(s.start, s.end - s.start));
  }
}

void pre_tokenize_step(const PreTokenizerStep& step, const std::vector<PrePiece>& in,
                       std::deque<std::string>* owned, std::vector<PrePiece>* out) {
  std::vector<std::string_view> parts;
  for (const PrePiece& piece : in) {
    std::string_view text = piece.text;
    if (step.is_metaspace) {
      const MetaspaceStep& m = step.metaspace;
      std::string s = replace_all(text, " ", m.replacement);
      bool prepend = m.prepend_scheme == PrependScheme::kAlways ||
                     (m.prepend_scheme == PrependScheme::kFirst && piece.at_start);
      if (prepend && s.compare(0, m.replacement.size(), m.replacement) != 0) s.insert(0, m.replacement);
      owned->push_back(std::move(s));  // a deque: earlier pieces' views stay valid
      text = owned->back();
      if (!m.split) {
        if (!text.empty()) out->push_back({text, piece.at_start});
        continue;
      }
    }
    parts.clear();
    split_pieces(step.is_metaspace ? step.metaspace.splitter : step.split, text, &parts);
    for (std::string_view part : parts) out->push_back({part, piece.at_start && part.data() == text.data()});
  }
}

void byte_level_words(const ByteLevelStep& step, std::string_view piece,
                      std::vector<std::pair<size_t, size_t>>* scratch, std::string* prefixed,
                      std::vector<std::string_view>* out) {
  std::string_view subject = piece;
  if (step.add_prefix_space && !piece.empty() && piece.front() != ' ') {
    prefixed->clear();
    prefixed->push_back(' ');
    prefixed->append(piece);
    subject = *prefixed;
  }
  if (!step.use_regex) {
    if (!subject.empty()) out->push_back(subject);
    return;
  }
  scratch->clear();
  step.regex.find_all(subject, scratch);
  size_t prev = 0;  // Isolated: matches and the gaps between them (invalid UTF-8 bytes) are words
  for (auto [s, e] : *scratch) {
    if (prev != s) out->push_back(subject.substr(prev, s - prev));
    out->push_back(subject.substr(s, e - s));
    prev = e;
  }
  if (prev != subject.size()) out->push_back(subject.substr(prev));
}

}  // namespace rlrun::engine
