// tokenizer/internal.h - the loaded state of a Tokenizer, shared by the loader
// (tokenizer/json.cc), the text stages (tokenizer/text.cc) and the BPE model (tokenizer/bpe.cc).
// Not part of the public API: include engine/tokenizer/tokenizer.h instead.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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

enum class PrependScheme { kAlways, kFirst, kNever };

// HF Metaspace pre-tokenizer: spaces become `replacement`, which is prepended to a piece per the
// scheme ("first": only to the piece that starts the input text), then, when `split`, the piece is
// cut before each replacement (Split MergedWithNext).
struct MetaspaceStep {
  std::string replacement;  // UTF-8 of one char, usually U+2581
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;
  SplitStep splitter;  // the literal replacement, MergedWithNext
};

// One pre-tokenizer step before the optional final ByteLevel: a Split or a Metaspace.
struct PreTokenizerStep {
  bool is_metaspace = false;
  SplitStep split;
  MetaspaceStep metaspace;
};

struct ByteLevelStep {  // HF ByteLevel pre-tokenizer; always the last step
  bool present = false;  // without one, BPE works on the UTF-8 chars of each pre-token
  bool add_prefix_space = false;
  bool use_regex = true;
  Regex regex;  // GPT-2's pattern when use_regex
};

// Lets unordered_map<std::string, ...> be searched with a string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

enum class NormalizerKind { kNFC, kNFD, kNFKC, kNFKD, kPrepend, kReplace, kStrip };

struct NormalizerStep {
  NormalizerKind kind = NormalizerKind::kNFC;
  std::string text;     // kPrepend: the prefix (added to non-empty text); kReplace: the literal pattern
  std::string content;  // kReplace: what each occurrence becomes
  bool strip_left = false, strip_right = false;  // kStrip: Unicode whitespace on either end
};

// HF decoders, applied in order to the list of token strings (kByteLevel: one string per token in,
// one out). Every step sees and returns a list; Fuse joins it into one.
enum class DecoderKind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };

struct DecoderStep {
  DecoderKind kind = DecoderKind::kFuse;
  std::string pattern, content;  // kReplace: literal pattern -> content; kStrip: the char (content)
  int32_t start = 0, stop = 0;   // kStrip: at most this many `content` chars cut from each end
  std::string replacement;       // kMetaspace
  bool metaspace_prepend = true;  // kMetaspace: prepend_scheme is not "never" (drop U+2581 of token 0)
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// BPE over token ids. Symbols start as one per byte (the byte's GPT-2 unicode char) after a
// ByteLevel pre-tokenizer, otherwise one per UTF-8 char; a char absent from the vocab becomes its
// <0xNN> byte tokens (byte_fallback), else unk, else is dropped, as in HF.
struct BpeModel {
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;  // token text -> id
  // (left id << 32 | right id) -> (rank, merged id); lower rank merges first.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::array<int32_t, 256> byte_ids{};  // id of each byte's single-char token; -1 when absent
  int32_t unk_id = -1;                  // -1: no unk token, unknown bytes are dropped (as HF)
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is itself in the vocab is one token
  bool byte_level = true;      // symbols from bytes (ByteLevel pre-tokenizer) or from UTF-8 chars
  bool byte_fallback = false;
  std::array<int32_t, 256> fallback_ids{};  // id of "<0xNN>" for each byte; -1 when absent

  // Appends the ids of one pre-token (raw bytes, before the byte-level mapping).
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;
};

// The GPT-2 byte <-> unicode-char table: printable bytes map to themselves, the others to
// U+0100 onwards, so every byte has a visible, non-space char. Each entry is that char's UTF-8.
const std::array<std::string, 256>& byte_to_unicode();

struct TokenizerImpl {
  std::string source_name;
  std::vector<AddedToken> added;              // in file order; never resized after load
  // Pointers into `added`, longest content first: matched on the raw / the normalized text.
  std::vector<const AddedToken*> added_raw, added_normalized;
  // Whether some added token of the set starts with this byte (skips most positions cheaply).
  std::array<bool, 256> added_raw_first{}, added_normalized_first{};
  std::vector<NormalizerStep> normalizers;    // applied in order; empty: none
  std::vector<PreTokenizerStep> pre_steps;    // pre-tokenizer steps before ByteLevel
  ByteLevelStep byte_level;
  std::vector<DecoderStep> decoders;          // applied in order; empty: tokens joined by " " (HF)
  bool has_decoder = true;
  BpeModel bpe;

  // Per id: the bytes a ByteLevel decoder makes of it, whether it is assigned, and whether it is special.
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
// NFC/NFD/NFKC/NFKD via utf8proc (maximal invalid UTF-8 byte runs are kept as they are), Prepend,
// literal Replace, Strip. `starts_at_origin` (optional) is set false when the first char of the
// result no longer stems from the first char of `text` (HF offsets; Metaspace "first" reads them).
std::string normalize(std::string_view text, const std::vector<NormalizerStep>& steps,
                      bool* starts_at_origin = nullptr);
// Runs the Split / Metaspace steps then ByteLevel over `text`, calling emit(word) for each final
// pre-token. `at_start`: `text` starts the input (Metaspace prepend_scheme "first").
template <class Emit>
void pre_tokenize(const TokenizerImpl& impl, std::string_view text, bool at_start, Emit&& emit);
void split_pieces(const SplitStep& step, std::string_view text, std::vector<std::string_view>* out);
// A piece of pre-tokenized text; `at_start`: it begins the input text.
struct PrePiece {
  std::string_view text;
  bool at_start;
};
// Applies one pre-tokenizer step to `in`; pieces a Metaspace rewrites are kept in `owned`.
void pre_tokenize_step(const PreTokenizerStep& step, const std::vector<PrePiece>& in,
                       std::deque<std::string>* owned, std::vector<PrePiece>* out);
// Runs the decoder steps over the tokens of `ids` (all assigned); `lossy`: as DecodeOptions.
std::string run_decoders(const TokenizerImpl& impl, const std::vector<int32_t>& ids, bool lossy);
void byte_level_words(const ByteLevelStep& step, std::string_view piece,
                      std::vector<std::pair<size_t, size_t>>* scratch, std::string* prefixed,
                      std::vector<std::string_view>* out);
// Every non-overlapping occurrence of `pattern` (non-empty) replaced, left to right.
std::string replace_literal(std::string_view text, std::string_view pattern, std::string_view content);
// The bytes a ByteLevel decoder makes of a token: each char mapped back through the byte-level
// table, or the token's own bytes when some char is not in it (HF).
std::string token_bytes(const std::string& token);
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
void pre_tokenize(const TokenizerImpl& impl, std::string_view text, bool at_start, Emit&& emit) {
  std::vector<PrePiece> pieces{{text, at_start}}, next;
  std::deque<std::string> owned;
  for (const PreTokenizerStep& step : impl.pre_steps) {
    next.clear();
    pre_tokenize_step(step, pieces, &owned, &next);
    pieces.swap(next);
  }
  if (!impl.byte_level.present) {
    for (const PrePiece& p : pieces) emit(p.text);
    return;
  }
  std::vector<std::pair<size_t, size_t>> scratch;
  std::string prefixed;
  std::vector<std::string_view> words;
  for (const PrePiece& p : pieces) {
    words.clear();
    byte_level_words(impl.byte_level, p.text, &scratch, &prefixed, &words);
    for (std::string_view w : words) emit(w);  // views may point into `prefixed`: use now
  }
}

// Loader (tokenizer/json.cc).
Result<std::shared_ptr<TokenizerImpl>> parse_tokenizer_json(std::string_view json_text,
                                                            const std::string& source_name);
// The same from a parsed document (a tokenizer built in memory, e.g. from a GGUF file's metadata).
Result<std::shared_ptr<TokenizerImpl>> parse_tokenizer_json(const nlohmann::json& root, const std::string& source_name);

}  // namespace rlrun::engine
