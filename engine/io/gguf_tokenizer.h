// gguf_tokenizer.h - the tokenizer in a GGUF file's metadata (tokenizer.ggml.*) as an HF
// tokenizer.json, built the way transformers 5 builds it from the same file
// (integrations/gguf/gguf_tokenizer_mapping.py), so that the two encode every text alike:
//
//   tokenizer.ggml.model "gpt2"  byte-level BPE: the file's tokens and merges; tokenizer.ggml.pre
//       picks the split before ByteLevel: "qwen2", "deepseek-r1-qwen" (Qwen2's regex, one digit a
//       piece), "llama-bpe", "llama3", "llama-v3" (Llama 3's regex, digits in threes), "smollm"
//       (single digits, then GPT-2's regex), "gpt2", "default" or none (GPT-2's regex).
//   tokenizer.ggml.model "llama" (SentencePiece) in a gemma, gemma2 or gemma3 file: Gemma's BPE
//       (spaces written U+2581 by a normalizer, UTF-8 chars with byte fallback, <unk>). The file
//       has scores but no merges; Gemma's scores do not follow its merge order, so the merges are
//       rebuilt from the vocabulary with the file order as priority (transformers'
//       generate_merges): every split of a token into two tokens, the earlier token first, and for
//       one token the longer left part first. Tokens of whitespace holding a space ("  ", as the
//       file spells them) are respelled in U+2581, as the vocabulary sees them after the normalizer.
//   Anything else is refused, naming the key and its value.
// Control tokens (token_type 3) become special added tokens and user-defined ones (4) plain added
// tokens that match whole (for byte-level files, a control token spelled outside the byte alphabet
// is skipped, as transformers does). The golden ids of tests/engine/io/gguf_tokenizer_test.cc and
// gguf_downloads_test.cc come from transformers on the same files.
#pragma once

#include <string>

#include "common/status.h"
#include "engine/io/gguf.h"
#include "engine/model/config.h"
#include "engine/tokenizer/tokenizer.h"

namespace rlrun::engine {

Result<std::string> gguf_tokenizer_json(const GgufFile& file);
// GgufFile::open and gguf_tokenizer_json, loaded as a Tokenizer.
Result<Tokenizer> load_gguf_tokenizer(const std::string& path);

// The HF tokenizer_config.json equivalent of the file's metadata: the bos/eos/unk/pad tokens by
// content, add_bos_token / add_eos_token when the file says, tokenizer.chat_template when present,
// model_max_length (what `rlrun convert` writes and engine/io/tokenizer_config.h reads).
Result<std::string> gguf_tokenizer_config_json(const GgufFile& file, const ModelConfig& config);

}  // namespace rlrun::engine
