// jinja/lexer.h - template source -> tokens, with jinja2's whitespace rules as HF configures them.
//
// jinja2 as transformers runs it: trim_blocks (a newline right after `%}` or `#}` is dropped),
// lstrip_blocks (spaces and tabs from the start of a line up to `{%` or `{#` are dropped, where
// the tag starts the line), `-` beside a delimiter strips all whitespace on that side, `+` turns
// trim_blocks/lstrip_blocks off for that side, newlines are normalized to \n, and a single trailing
// newline of the source is dropped (keep_trailing_newline=False). Comments vanish; `{% raw %}`
// bodies come out as text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlrun::engine::jinja {

enum class TokenType {
  kText,        // template data, whitespace rules applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,    // text holds the operator: + - * / // % ** ~ == != < > <= >= ( ) [ ] { } . , : | =
  kEnd,         // end of the template
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t integer = 0;
  double real = 0;
};

// Throws TemplateError (with the line) on an unterminated tag, comment, string or raw block.
std::vector<Token> lex(const std::string& source);

}  // namespace rlrun::engine::jinja
