// chat_template.h - a model's chat template (Jinja) rendered as HF transformers renders it.
//
// `tokenizer.apply_chat_template(messages, add_generation_prompt=..., tokenize=False)` renders
// the tokenizer's `chat_template` with jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True) plus loopcontrols, HF's tojson (ensure_ascii=False, indent=...),
// raise_exception(msg) and strftime_now(fmt). ChatTemplate is a general interpreter of the Jinja
// that chat templates use (engine/tokenizer/jinja/), not a table of known templates; its output is
// byte-identical to HF's (tests/engine/tokenizer/chat_template_golden_test.cc).
//
// Templates are untrusted input: a syntax error, an unsupported feature, raise_exception(), or a
// runaway template (loop iterations, output size, recursion; ChatTemplateLimits) gives a Status
// naming the template line, never a crash or a hang.
//
// Thread safety: a ChatTemplate is immutable after parse(); render() may run on any thread.
#pragma once

#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace rlrun::engine {

namespace jinja {
struct Template;
}

struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{16} << 20;  // the rendered text, or any string it builds
  int64_t max_loop_iterations = 1'000'000;     // all loops of one render together
  int max_call_depth = 64;                     // nested macro calls
};

// What HF passes to the template. JSON keeps the caller's key order (tojson prints it).
struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role", "content", ...}]
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;      // a list of JSON schemas, or null (HF's tools=None)
  nlohmann::ordered_json documents;  // a list of {"title", "text"}, or null
  // HF's special_tokens_map: bos_token, eos_token, unk_token, pad_token, ... (from
  // tokenizer_config.json); absent ones are undefined in the template.
  std::map<std::string, std::string> special_tokens;
  // More template variables (HF's **kwargs, e.g. "date_string"); an object or null. They override
  // the special tokens, as in HF.
  nlohmann::ordered_json extra;
  // The local time strftime_now() formats; unset: the wall clock at render.
  std::function<std::tm()> now;
};

class ChatTemplate {
 public:
  // Parses once; a syntax error or an unsupported tag, filter or test is an InvalidArgument naming
  // the line ("chat template line 3: unsupported filter 'wordwrap'").
  static Result<ChatTemplate> parse(const std::string& source, const ChatTemplateLimits& limits = {});

  // HF's apply_chat_template(..., tokenize=False). raise_exception(msg) gives InvalidArgument
  // "chat template raised an exception (line N): msg"; an exceeded limit ResourceExhausted.
  Result<std::string> render(const ChatRenderInput& input) const;

  // The same with every template variable given as a JSON object (nothing added but the builtins).
  Result<std::string> render_variables(const nlohmann::ordered_json& variables,
                                       const std::function<std::tm()>& now = {}) const;

 private:
  ChatTemplate(std::shared_ptr<const jinja::Template> tmpl, const ChatTemplateLimits& limits)
      : template_(std::move(tmpl)), limits_(limits) {}
  std::shared_ptr<const jinja::Template> template_;
  ChatTemplateLimits limits_;
};

}  // namespace rlrun::engine
