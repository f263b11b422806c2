// tokenizer.h - HF `tokenizer.json` BPE: text -> token ids -> text.
//
// One tokenizer path for every model: byte-level BPE (GPT-2, Qwen2.5, Llama 3, SmolLM2, the small
// test tokenizer under configs/tokenizers/) and SentencePiece-style BPE (Llama 2, TinyLlama,
// Mistral, Gemma: byte_fallback, "▁" for spaces) go through the same loader and encoder.
//
// Encoding follows HF `tokenizers` (the reference the golden tests compare against):
//   1. added tokens (`added_tokens`) are matched first, leftmost-longest, honouring
//      lstrip / rstrip / single_word; `normalized: false` ones on the raw text, `normalized: true`
//      ones on the normalized text;
//   2. the remaining text is normalized (NFC / NFD / NFKC / NFKD, Prepend, Replace of a string,
//      Strip, or a Sequence of them);
//   3. pre-tokenized (Split, Digits, Metaspace, ByteLevel last, a Sequence of them, or none);
//   4. each pre-token is split into symbols (bytes after ByteLevel, else UTF-8 chars; a char not
//      in the vocab becomes its <0xNN> tokens under byte_fallback, else unk) and merged by rank.
// Decoding runs the file's decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace,
// Sequence). Anything else that would change the ids or the text (a Regex Replace, another model
// type, normalizer, pre-tokenizer or decoder) is refused at load, naming the field.
// encode() never adds template tokens (BOS/EOS): the post_processor (e.g. TemplateProcessing) is
// ignored, i.e. ids are those of HF `encode(text, add_special_tokens=False)`. Callers add special
// tokens explicitly.
//
// Thread safety: a Tokenizer is immutable after load except for an internal word cache guarded
// by a mutex; encode/decode may be called from any thread. Copies share the loaded state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace rlrun::engine {

struct TokenizerImpl;  // tokenizer/internal.h

struct DecodeOptions {
  bool skip_special_tokens = false;  // drop added tokens marked `special` (e.g. <|im_end|>)
  // true: invalid UTF-8 in the decoded bytes becomes U+FFFD (as HF does, one per maximal invalid
  // subsequence); false: the raw bytes are returned (e.g. to stream partial characters).
  bool lossy_utf8 = true;
};

class Tokenizer {
 public:
  // Loads an HF tokenizer.json. A malformed or unsupported file gives a Status naming the file
  // and the field at fault (e.g. "tok.json: model.merges[7]: token `ab` is not in model.vocab").
  static Result<Tokenizer> load(const std::string& path);
  // Same, from JSON text; `source_name` stands for the file name in error messages.
  static Result<Tokenizer> from_json(std::string_view json_text, const std::string& source_name);
  // Same, from a parsed tokenizer.json document (one built in memory: no text round trip).
  static Result<Tokenizer> from_json_value(const nlohmann::json& document, const std::string& source_name);

  // Any bytes are accepted: invalid UTF-8 is split around and encoded byte by byte.
  std::vector<int32_t> encode(std::string_view text) const;
  // Fails (never crashes) on an id that names no token.
  Result<std::string> decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  // One past the largest id (vocab and added tokens); ids below it may still be unassigned.
  int32_t vocab_size() const;
  // The id of a token as written in the file (added token content, or a vocab entry such as
  // "Ġthe" or "▁the"); nullopt when absent.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  const std::string& source_name() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TokenizerImpl> impl_;
};

}  // namespace rlrun::engine
