// prompt_format.h - how a task's prompt text becomes the token ids a policy continues
// (task.chat_template).
//
//   auto  one user message in the model's chat template when it has one (tokenizer_config.json or
//         chat_template.jinja beside model.tokenizer, or the .gguf's metadata), else the raw text
//   none  the raw text, encoded as is
//   PATH  one user message in the Jinja template at PATH
//
// A chat row of a dataset (Problem::messages_json) is rendered whole instead of one user message.
//
// With a template, the text is HF's apply_chat_template([{"role": "user", "content": prompt}],
// add_generation_prompt=True, tokenize=False) with the model's special tokens, encoded without
// adding special tokens (HF's tokenize=True): the same ids HF gives. The template's end-of-turn
// token (what the template writes right after an assistant message, e.g. <|im_end|>,
// <|eot_id|>, <end_of_turn>) ends answers: it is the first stop token.
//
// create() renders a probe prompt, so a template that cannot render fails the run at its start,
// naming task.chat_template and the template's source and line.
#pragma once

#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/io/tokenizer_config.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

class PromptFormat {
 public:
  // `choice`: task.chat_template. `tokenizer_path`: model.tokenizer (empty: the built-in
  // tokenizer, which has no template of its own). `now`: the time templates print (strftime_now);
  // unset: the wall clock.
  static Result<PromptFormat> create(const std::string& choice, const std::string& tokenizer_path,
                                     const engine::Tokenizer& tokenizer, std::function<std::tm()> now = {});
  static PromptFormat raw(const engine::Tokenizer& tokenizer);

  Result<std::string> text(const std::string& prompt) const;  // what the model reads
  Result<std::vector<int32_t>> ids(const std::string& prompt) const;
  // A problem's prompt, or its chat (messages_json) rendered as HF's apply_chat_template(messages,
  // add_generation_prompt=True) does; a chat without a template is an error.
  Result<std::string> text(const Problem& problem) const;
  Result<std::vector<int32_t>> ids(const Problem& problem) const;
  // A chat (a JSON list of {"role", "content", ...}) rendered as text(problem) renders a chat row
  // (`rlrun serve`'s chat completions).
  Result<std::string> chat_text(const nlohmann::ordered_json& messages) const;
  bool is_chat() const { return chat_.has_value(); }
  std::optional<int32_t> end_of_turn() const { return end_of_turn_; }
  // For the log: "raw text" or "the chat template of /m/tokenizer_config.json".
  const std::string& description() const { return description_; }

 private:
  explicit PromptFormat(const engine::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  std::optional<int32_t> find_end_of_turn() const;

  engine::Tokenizer tokenizer_;  // copies share the loaded tokenizer
  std::optional<engine::ChatTemplate> chat_;
  engine::TokenizerChatConfig config_;
  std::optional<int32_t> end_of_turn_;
  std::string description_ = "raw text";
  std::function<std::tm()> now_;
};

}  // namespace rlrun::orchestrator
