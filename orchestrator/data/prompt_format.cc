// data/prompt_format.cc - raw or chat-templated prompts, and the template's end-of-turn token.
#include "orchestrator/data/prompt_format.h"

#include "common/file_io.h"
#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {

nlohmann::ordered_json message(const char* role, const std::string& content) {
  return nlohmann::ordered_json{{"role", role}, {"content", content}};
}

}  // namespace

PromptFormat PromptFormat::raw(const engine::Tokenizer& tokenizer) { return PromptFormat(tokenizer); }

Result<PromptFormat> PromptFormat::create(const std::string& choice, const std::string& tokenizer_path,
                                          const engine::Tokenizer& tokenizer, std::function<std::tm()> now) {
  PromptFormat f(tokenizer);
  f.now_ = std::move(now);
  if (choice == "none") return f;
  if (choice == "auto") {
    if (tokenizer_path.empty()) return f;  // the built-in tokenizer: no model, no template
    Result<engine::TokenizerChatConfig> config = engine::read_tokenizer_chat_config(tokenizer_path);
    if (!config.ok()) return invalid_argument(str("task.chat_template: auto: ", config.status().message()));
    f.config_ = std::move(*config);
    if (f.config_.chat_template.empty()) return f;
  } else {
    if (!tokenizer_path.empty()) {  // the model's special tokens still fill bos_token, eos_token
      Result<engine::TokenizerChatConfig> config = engine::read_tokenizer_chat_config(tokenizer_path);
      if (config.ok()) f.config_.special_tokens = config->special_tokens;
    }
    RLRUN_ASSIGN_OR_RETURN(f.config_.chat_template, read_file(choice, "task.chat_template"));
    f.config_.template_source = choice;
  }
  Result<engine::ChatTemplate> parsed = engine::ChatTemplate::parse(f.config_.chat_template);
  if (!parsed.ok())
    return invalid_argument(str("task.chat_template: ", f.config_.template_source, ": ", parsed.status().message(),
                                "; set task.chat_template: none for raw prompts"));
  f.chat_ = std::move(*parsed);
  f.description_ = str("the chat template of ", f.config_.template_source);
  if (Result<std::string> probe = f.text("What is 2 + 2?"); !probe.ok())
    return invalid_argument(str("task.chat_template: ", f.config_.template_source, " cannot render a user message: ",
                                probe.status().message(), "; set task.chat_template: none for raw prompts"));
  f.end_of_turn_ = f.find_end_of_turn();
  return f;
}

Result<std::string> PromptFormat::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  engine::ChatRenderInput in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  in.special_tokens = config_.special_tokens;
  in.now = now_;
  return chat_->render(in);
}

Result<std::string> PromptFormat::text(const std::string& prompt) const {
  if (!chat_) return prompt;
  return render(nlohmann::ordered_json::array({message("user", prompt)}), true);
}

Result<std::vector<int32_t>> PromptFormat::ids(const std::string& prompt) const {
  RLRUN_ASSIGN_OR_RETURN(const std::string rendered, text(prompt));
  return tokenizer_.encode(rendered);
}

Result<std::string> PromptFormat::text(const Problem& problem) const {
  if (problem.messages_json.empty()) return text(problem.prompt);
  if (!chat_)
    return invalid_argument(str("a chat row (task.messages_field) needs a chat template, and the prompts are ",
                                description_, ": set task.chat_template to auto (a model with a template) or a Jinja file"));
  return chat_text(nlohmann::ordered_json::parse(problem.messages_json, nullptr, false));
}

Result<std::string> PromptFormat::chat_text(const nlohmann::ordered_json& messages) const {
  if (!chat_) return invalid_argument(str("a chat needs a chat template, and the prompts are ", description_));
  if (!messages.is_array()) return invalid_argument("a chat's messages are not a JSON list");
  return render(messages, true);
}

Result<std::vector<int32_t>> PromptFormat::ids(const Problem& problem) const {
  RLRUN_ASSIGN_OR_RETURN(const std::string rendered, text(problem));
  return tokenizer_.encode(rendered);
}

// The first special token the template writes after an assistant message's content.
std::optional<int32_t> PromptFormat::find_end_of_turn() const {
  const std::string answer = "rlrun-answer-8d1f";  // no spaces: templates trim the content
  Result<std::string> conversation = render(
      nlohmann::ordered_json::array({message("user", "question"), message("assistant", answer)}), false);
  if (!conversation.ok()) return std::nullopt;
  const size_t at = conversation->rfind(answer);
  if (at == std::string::npos) return std::nullopt;
  for (int32_t id : tokenizer_.encode(std::string_view(*conversation).substr(at + answer.size()))) {
    if (tokenizer_.is_special(id)) return id;
  }
  return std::nullopt;
}

}  // namespace rlrun::orchestrator
