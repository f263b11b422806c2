// chat_template.cc - the public face of the Jinja interpreter: builds HF's template variables and
// turns the interpreter's TemplateError into a Status.
#include "engine/tokenizer/chat_template.h"

#include <new>

#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/interpreter.h"

namespace rlrun::engine {
namespace {

Status to_status(const jinja::TemplateError& e) {
  const std::string where = e.line > 0 ? " (line " + std::to_string(e.line) + ")" : "";
  if (e.raised) return invalid_argument("chat template raised an exception" + where + ": " + e.what());
  std::string message = "chat template" + (e.line > 0 ? " line " + std::to_string(e.line) : std::string()) +
                        ": " + e.what();
  return e.limit ? resource_exhausted(std::move(message)) : invalid_argument(std::move(message));
}

std::tm local_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(const std::string& source, const ChatTemplateLimits& limits) {
  try {
    return ChatTemplate(jinja::parse_template(source), limits);
  } catch (const jinja::TemplateError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while parsing");
  }
}

Result<std::string> ChatTemplate::render(const ChatRenderInput& input) const {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (const auto& [name, token] : input.special_tokens) vars[name] = token;
  if (input.extra.is_object()) {
    for (const auto& [k, v] : input.extra.items()) vars[k] = v;
  } else if (!input.extra.is_null()) {
    return invalid_argument("chat template: extra variables must be a JSON object");
  }
  vars["messages"] = input.messages;
  vars["tools"] = input.tools;
  vars["documents"] = input.documents;
  vars["add_generation_prompt"] = input.add_generation_prompt;
  return render_variables(vars, input.now);
}

Result<std::string> ChatTemplate::render_variables(const nlohmann::ordered_json& variables,
                                                   const std::function<std::tm()>& now) const {
  if (!variables.is_object()) return invalid_argument("chat template: variables must be a JSON object");
  jinja::Limits limits;
  limits.max_output_bytes = limits_.max_output_bytes;
  limits.max_loop_iterations = limits_.max_loop_iterations;
  limits.max_call_depth = limits_.max_call_depth;
  try {
    jinja::Value globals = jinja::Value::from_json(variables);
    jinja::Interpreter interpreter(limits, now ? now : std::function<std::tm()>(local_now));
    return interpreter.render(*template_, *globals.dict);
  } catch (const jinja::TemplateError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while rendering");
  }
}

}  // namespace rlrun::engine
