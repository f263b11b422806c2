// tokenizer/internal.h - the loaded state of a Tokenizer, shared by the loader
// (tokenizer/json.cc), the text stages (tokenizer/text.cc) and the BPE model (tokenizer/bpe.cc).
// Not part of the public API: include engine/tokenizer/tokenizer.h instead.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace rlrun::engine {

// A PCRE2 pattern compiled once (UTF + UCP, JIT when available). Matching accepts invalid UTF-8
// (PCRE2_MATCH_INVALID_UTF): invalid bytes simply never match. Copies share the compiled code.
class Regex {
 public:
  Regex() = default;
  // `literal`: the pattern is a plain string (HF Split's {"String": ...}), not a regex.
  static Result<Regex> compile(const std::string& pattern, bool literal);
  // Byte ranges [start, end) of the successive non-overlapping, non-empty matches in `subject`.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>* out) const;
  bool empty() const { return code_ == nullptr; }

 private:
  std::shared_ptr<void> code_;  // pcre2_code_8*, freed by pcre2_code_free_8
};

// How a Split step turns matches into pieces (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitStep {  // HF Split, and Digits (a Split on \p{N})
  Regex regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

struct ByteLevelStep {  // HF ByteLevel pre-tokenizer; always the last step
  bool present = false;  // set by the loader; a file without one is rejected
  bool add_prefix_space = false;
  bool use_regex = true;
  Regex regex;  // GPT-2's pattern when use_regex
};

enum class NormalizerKind { kNFC, kNFD, kNFKC, kNFKD };

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// Byte-level BPE over token ids. Symbols start as one per byte (the byte's GPT-2 unicode char).
struct BpeModel {
  std::unordered_map<std::string, int32_t> vocab;  // byte-level token text -> id
  // (left id << 32 | right id) -> (rank, merged id); lower rank merges first.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::array<int32_t, 256> byte_ids{};  // id of each byte's single-char token; -1 when absent
  int32_t unk_id = -1;                  // -1: no unk token, unknown bytes are dropped (as HF)
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is itself in the vocab is one token

  // Appends the ids of one pre-token (raw bytes, before the byte-level mapping).
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;
};

// The GPT-2 byte <-> unicode-char table: printable bytes map to themselves, the others to
// U+0100 onwards, so every byte has a visible, non-space char. Each entry is that char's UTF-8.
const std::array<std::string, 256>& byte_to_unicode();

// Lets unordered_map<std::string, ...> be searched with a string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct TokenizerImpl {
  std::string source_name;
  std::vector<AddedToken> added;              // in file order; never resized after load
  // Pointers into `added`, longest content first: matched on the raw / the normalized text.
  std::vector<const AddedToken*> added_raw, added_normalized;
  // Whether some added token of the set starts with this byte (skips most positions cheaply).
  std::array<bool, 256> added_raw_first{}, added_normalized_first{};
  std::vector<NormalizerKind> normalizers;    // applied in order; empty: none
  std::vector<SplitStep> split_steps;         // pre-tokenizer steps before ByteLevel
  ByteLevelStep byte_level;
  BpeModel bpe;

  // Per id: the bytes decode() emits, whether it is assigned, and whether it is special.
  std::vector<std::string> id_bytes;
  std::vector<std::string> id_token;  // the token text as written in the file
  std::vector<uint8_t> id_assigned;
  std::vector<uint8_t> id_special;

  // Word cache: pre-token bytes -> ids. Bounded; cleared when full.
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  static constexpr size_t kCacheMaxEntries = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 256;  // longer words are not cached
};

// Text stages (tokenizer/text.cc).
// NFC/NFD/NFKC/NFKD via utf8proc; maximal invalid UTF-8 byte runs are kept as they are.
std::string normalize(std::string_view text, const std::vector<NormalizerKind>& kinds);
// Runs the Split steps then ByteLevel over `text`, calling emit(word) for each final pre-token.
template <class Emit>
void pre_tokenize(const TokenizerImpl& impl, std::string_view text, Emit&& emit);
void split_pieces(const SplitStep& step, std::string_view text, std::vector<std::string_view>* out);
void byte_level_words(const ByteLevelStep& step, std::string_view piece,
                      std::vector<std::pair<size_t, size_t>>* scratch, std::string* prefixed,
                      std::vector<std::string_view>* out);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
// Decodes the code point at text[i] (advancing i); -1 and one byte for an invalid sequence.
int32_t next_code_point(std::string_view text, size_t* i);
// The code point that ends at `end` (valid UTF-8 assumed back to a lead byte); -1 if none.
int32_t last_code_point(std::string_view text, size_t end);
bool is_unicode_whitespace(int32_t cp);
// Rust regex `\w`: letters, marks, decimal digits, connector punctuation (`_`).
bool is_word_char(int32_t cp);

template <class Emit>
void pre_tokenize(const TokenizerImpl& impl, std::string_view text, Emit&& emit) {
  std::vector<std::string_view> pieces{text}, next;
  for (const SplitStep& step : impl.split_steps) {
    next.clear();
    for (std::string_view p : pieces) split_pieces(step, p, &next);
    pieces.swap(next);
  }
  std::vector<std::pair<size_t, size_t>> scratch;
  std::string prefixed;
  std::vector<std::string_view> words;
  for (std::string_view p : pieces) {
    words.clear();
    byte_level_words(impl.byte_level, p, &scratch, &prefixed, &words);
    for (std::string_view w : words) emit(w);  // views may point into `prefixed`: use now
  }
}

// Loader (tokenizer/json.cc).
Result<std::shared_ptr<TokenizerImpl>> parse_tokenizer_json(std::string_view json_text,
                                                            const std::string& source_name);

}  // namespace rlrun::engine
