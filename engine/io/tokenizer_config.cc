// engine/io/tokenizer_config.cc - chat template and special tokens from tokenizer_config.json,
// chat_template.jinja or a .gguf file.
#include "engine/io/tokenizer_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/observe/log.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_model.h"

namespace rlrun::engine {

namespace fs = std::filesystem;

Result<TokenizerChatConfig> parse_tokenizer_config(const std::string& json_text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument(str(source, ": not a JSON object"));
  TokenizerChatConfig c;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) continue;
    if (it->is_string()) {
      c.special_tokens[name] = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      c.special_tokens[name] = (*it)["content"].get<std::string>();  // an AddedToken as saved by HF
    } else {
      return invalid_argument(str(source, ": `", name, "` is neither a string nor {\"content\": ...}"));
    }
  }
  auto t = j.find("chat_template");
  if (t == j.end() || t->is_null()) return c;
  if (t->is_string()) {
    c.chat_template = t->get<std::string>();
  } else if (t->is_array()) {  // named templates: HF uses "default" for chat without tools
    for (const nlohmann::json& named : *t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        c.chat_template = named["template"].get<std::string>();
    }
    if (c.chat_template.empty())
      return invalid_argument(str(source, ": `chat_template` is a list of named templates without one named \"default\""));
  } else {
    return invalid_argument(str(source, ": `chat_template` is neither a string nor a list of named templates"));
  }
  c.template_source = source;
  return c;
}

Result<TokenizerChatConfig> read_tokenizer_chat_config(const std::string& tokenizer_path) {
  if (is_gguf_path(tokenizer_path)) {
    RLRUN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(tokenizer_path));
    RLRUN_ASSIGN_OR_RETURN(const ModelConfig config, gguf_model_config(file));
    RLRUN_ASSIGN_OR_RETURN(const std::string text, gguf_tokenizer_config_json(file, config));
    return parse_tokenizer_config(text, tokenizer_path);
  }
  const fs::path folder = fs::path(tokenizer_path).parent_path();
  TokenizerChatConfig c;
  std::error_code ec;
  if (const fs::path config = folder / "tokenizer_config.json"; fs::is_regular_file(config, ec)) {
    RLRUN_ASSIGN_OR_RETURN(const std::string text, read_file(config.string(), "the tokenizer config"));
    RLRUN_ASSIGN_OR_RETURN(c, parse_tokenizer_config(text, config.string()));
  }
  if (const fs::path jinja = folder / "chat_template.jinja"; fs::is_regular_file(jinja, ec)) {
    RLRUN_ASSIGN_OR_RETURN(c.chat_template, read_file(jinja.string(), "the chat template"));
    c.template_source = jinja.string();
  }
  return c;
}

}  // namespace rlrun::engine
