// jinja/lexer.cc - jinja2's Lexer.tokeniter, restricted to the default delimiters.
#include "engine/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "engine/tokenizer/internal.h"  // next_code_point
#include "engine/tokenizer/jinja/text.h"
#include "engine/tokenizer/jinja/value.h"

namespace rlrun::engine::jinja {
namespace {

// \r\n and \r become \n; one trailing newline is dropped.
std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool space_at(const std::string& s, size_t i, size_t* next) {
  if (i >= s.size()) return false;
  size_t j = i;
  if (!py_isspace(next_code_point(s, &j))) return false;
  *next = j;
  return true;
}

size_t skip_space(const std::string& s, size_t i) {
  size_t next;
  while (space_at(s, i, &next)) i = next;
  return i;
}

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's "unicode-escape" decoding of a string literal body (jinja2 does the same).
std::string decode_escapes(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) { out += c; continue; }
    char e = body[++i];
    auto hex = [&](int digits) {
      std::string h = body.substr(i + 1, digits);
      int32_t cp = 0;
      auto [p, ec] = std::from_chars(h.data(), h.data() + h.size(), cp, 16);
      if (h.size() != static_cast<size_t>(digits) || ec != std::errc() || p != h.data() + h.size() ||
          cp > 0x10FFFF) {
        throw TemplateError("invalid \\" + std::string(1, e) + " escape in a string literal", line);
      }
      i += digits;
      append_utf8(cp, &out);
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case 'N': throw TemplateError("\\N{...} escapes (Unicode names) are not supported", line);
      default:
        if (e >= '0' && e <= '7') {
          int32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            cp = cp * 8 + (body[++i] - '0');
          }
          append_utf8(cp, &out);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos, tag - pos);
      apply_left_strip(&text, sign, kind != '{', line_starting);
      emit_text(text, pos);
      size_t inner = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        pos = end_of_comment(inner, tag);
      } else if (kind == '%' && is_raw_begin(inner)) {
        pos = lex_raw(inner, tag);
      } else {
        pos = lex_tag(inner, kind == '%', tag);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back({TokenType::kEnd, "", line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  // Positions come mostly in increasing order: count newlines from the last one asked.
  int line_at(size_t pos) {
    pos = std::min(pos, src_.size());
    if (pos < line_pos_) { line_pos_ = 0; line_ = 1; }
    line_ += static_cast<int>(std::count(src_.begin() + line_pos_, src_.begin() + pos, '\n'));
    line_pos_ = pos;
    return line_;
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit_text(const std::string& text, size_t pos) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, text, line_at(pos)});
  }

  // `-` strips all trailing whitespace; otherwise lstrip_blocks drops the spaces between the last
  // newline (or the start of a line) and a block or comment tag.
  static void apply_left_strip(std::string* text, char sign, bool block_or_comment, bool line_starting) {
    if (sign == '-') {
      *text = py_strip(*text, std::nullopt, false, true);
      return;
    }
    if (sign == '+' || !block_or_comment) return;
    size_t l_pos = text->rfind('\n');
    l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
    if (l_pos == 0 && !line_starting) return;
    if (l_pos == text->size()) return;
    std::string rest = text->substr(l_pos);
    if (py_strip(rest, std::nullopt, true, true).empty()) text->resize(l_pos);
  }

  // After the closing delimiter: `-` strips all whitespace, `+` nothing, plain drops one newline
  // (trim_blocks) for blocks and comments. `at` is where the delimiter (without sign) starts.
  size_t after_end(size_t at, size_t delim_len, char sign, bool trim) const {
    size_t pos = at + delim_len;
    if (sign == '-') return skip_space(src_, pos);
    if (sign != '+' && trim && pos < src_.size() && src_[pos] == '\n') ++pos;
    return pos;
  }

  size_t end_of_comment(size_t inner, size_t tag) {
    size_t end = src_.find("#}", inner);
    if (end == std::string::npos) throw TemplateError("missing end of comment tag", line_at(tag));
    char sign = end > inner && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    return after_end(end, 2, sign, true);
  }

  bool is_raw_begin(size_t inner) const {
    size_t i = skip_space(src_, inner);
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && is_name_char(src_[i + 3]))) return false;
    i = skip_space(src_, i + 3);
    return src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0;
  }

  // {% raw %}...{% endraw %}: the body is text; `{%- endraw` strips it like any tag.
  size_t lex_raw(size_t inner, size_t tag) {
    size_t i = skip_space(src_, inner) + 3;
    i = skip_space(src_, i);
    size_t body = src_[i] == '-' ? skip_space(src_, i + 3) : i + 2;  // raw begin has no trim_blocks
    for (size_t at = src_.find("{%", body); at != std::string::npos; at = src_.find("{%", at + 1)) {
      char sign = at + 2 < src_.size() ? src_[at + 2] : '\0';
      size_t j = skip_space(src_, at + 2 + (sign == '-' || sign == '+' ? 1 : 0));
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j = skip_space(src_, j + 6);
      char end_sign = src_[j] == '-' || src_[j] == '+' ? src_[j] : '\0';
      size_t close = j + (end_sign ? 1 : 0);
      if (src_.compare(close, 2, "%}") != 0) continue;
      std::string text = src_.substr(body, at - body);
      apply_left_strip(&text, sign, true, false);
      emit_text(text, body);
      return after_end(close, 2, end_sign, true);
    }
    throw TemplateError("missing end of raw directive", line_at(tag));
  }

  size_t lex_tag(size_t pos, bool block, size_t tag) {
    tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", line_at(tag)});
    std::vector<char> balance;
    const std::string end = block ? "%}" : "}}";
    while (true) {
      if (balance.empty()) {
        char sign = pos < src_.size() && (src_[pos] == '-' || (block && src_[pos] == '+')) ? src_[pos] : '\0';
        size_t at = pos + (sign ? 1 : 0);
        if (src_.compare(at, 2, end) == 0) {
          tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", line_at(pos)});
          return after_end(at, 2, sign, block);
        }
      }
      size_t next;
      if (space_at(src_, pos, &next)) { pos = next; continue; }
      if (pos >= src_.size()) {
        throw TemplateError(std::string("unexpected end of template, expected '") + end + "'", line_at(tag));
      }
      pos = lex_token(pos, &balance);
    }
  }

  size_t lex_token(size_t pos, std::vector<char>* balance) {
    const int line = line_at(pos);
    char c = src_[pos];
    if (is_digit(c)) return lex_number(pos, line);
    if (is_name_start(c)) {
      size_t end = pos;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back({TokenType::kName, src_.substr(pos, end - pos), line});
      return end;
    }
    if (c == '\'' || c == '"') {
      size_t i = pos + 1;
      while (i < src_.size() && src_[i] != c) i += src_[i] == '\\' ? 2 : 1;
      if (i >= src_.size()) throw TemplateError("unterminated string literal", line);
      tokens_.push_back({TokenType::kString, decode_escapes(src_.substr(pos + 1, i - pos - 1), line), line});
      return i + 1;
    }
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        tokens_.push_back({TokenType::kOperator, op, line});
        return pos + 2;
      }
    }
    if (std::strchr("+-/*%~[](){}.:,|=<>;", c) == nullptr) {
      throw TemplateError(std::string("unexpected char '") + c + "'", line);
    }
    if (c == '(' || c == '[' || c == '{') balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) throw TemplateError(std::string("unexpected '") + c + "'", line);
      if (balance->back() != c) {
        throw TemplateError(std::string("unexpected '") + c + "', expected '" + balance->back() + "'", line);
      }
      balance->pop_back();
    }
    tokens_.push_back({TokenType::kOperator, std::string(1, c), line});
    return pos + 1;
  }

  // (\d+_)*\d+ with an optional .digits and e[+-]digits: a float if either is present.
  size_t lex_number(size_t pos, int line) {
    auto digits = [&](size_t i) {
      while (i < src_.size() && (is_digit(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1])))) ++i;
      return i;
    };
    size_t end = digits(pos);
    bool is_float = false;
    const bool after_dot = pos > 0 && src_[pos - 1] == '.';  // `x.0.1` is two subscripts, not a float
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) { end = digits(e); is_float = true; }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInteger, text, line};
    if (is_float) {
      t.real = std::strtod(text.c_str(), nullptr);
    } else {
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), t.integer);
      if (ec != std::errc()) throw TemplateError("integer literal " + text + " is too large", line);
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace rlrun::engine::jinja
