// tokenizer_config.h - the chat side of a model's tokenizer: its chat template and special tokens.
//
// For a tokenizer.json, HF keeps them beside it: `chat_template` in tokenizer_config.json (a
// string, or a list of {"name", "template"} of which "default" is the one for plain chat), or a
// chat_template.jinja file (newer transformers save it there; it wins, as in HF), and the special
// tokens bos_token, eos_token, unk_token, pad_token (a string, or {"content": ...}). For a .gguf
// file, the same from its metadata (tokenizer.chat_template, tokenizer.ggml.*_token_id).
// A model without tokenizer_config.json simply has no template. Malformed files are errors naming
// the file and key.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace rlrun::engine {

struct TokenizerChatConfig {
  std::string chat_template;                          // empty: the model has none
  std::string template_source;                        // the file it came from, for messages
  std::map<std::string, std::string> special_tokens;  // "bos_token" -> "<|im_start|>", ...
};

// `tokenizer_path`: a tokenizer.json (its folder is searched) or a .gguf file.
Result<TokenizerChatConfig> read_tokenizer_chat_config(const std::string& tokenizer_path);
// The same from the text of a tokenizer_config.json (`source` names it in errors).
Result<TokenizerChatConfig> parse_tokenizer_config(const std::string& json_text, const std::string& source);

}  // namespace rlrun::engine
