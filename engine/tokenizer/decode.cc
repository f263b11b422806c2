// tokenizer/decode.cc - HF decoders: token strings -> text, step by step as HF `decode_chain`
// does (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace). Tokens are byte strings here;
// HF's are Rust Strings, so where HF writes U+FFFD for invalid UTF-8 (ByteLevel, ByteFallback)
// the lossy mode does the same and the raw mode keeps the bytes.
#include "engine/tokenizer/internal.h"

namespace rlrun::engine {
namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

// The byte of a "<0xNN>" token, as Rust's u8::from_str_radix(NN, 16) reads it; -1 if not one.
int byte_token_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (token[3] == '+') return digit(token[4]);  // from_str_radix accepts a leading '+'
  int hi = digit(token[3]), lo = digit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

bool valid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    if (next_code_point(bytes, &i) < 0) return false;
  }
  return true;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens, bool lossy) {
  std::vector<std::string> out;
  std::string pending;  // bytes of consecutive <0xNN> tokens
  auto flush = [&] {
    if (pending.empty()) return;
    if (!lossy || valid_utf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t k = 0; k < pending.size(); ++k) out.push_back(kReplacementChar);  // one per byte, as HF
    }
    pending.clear();
  };
  for (std::string& t : tokens) {
    int b = byte_token_value(t);
    if (b >= 0) {
      pending.push_back(static_cast<char>(b));
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  return out;
}

// HF Strip: at most `start` leading and `stop` trailing chars equal to `content` cut.
std::string strip_chars(const std::string& token, const std::string& content, int32_t start, int32_t stop) {
  size_t begin = 0, end = token.size();
  for (int32_t k = 0; k < start && token.compare(begin, content.size(), content) == 0 && begin < end; ++k) {
    begin += content.size();
  }
  for (int32_t k = 0; k < stop && end >= begin + content.size() &&
                      token.compare(end - content.size(), content.size(), content) == 0; ++k) {
    end -= content.size();
  }
  return token.substr(begin, end - begin);
}

}  // namespace

std::string run_decoders(const TokenizerImpl& impl, const std::vector<int32_t>& ids, bool lossy) {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  size_t first_step = 0;
  if (!impl.decoders.empty() && impl.decoders[0].kind == DecoderKind::kByteLevel) {
    std::string bytes;  // ByteLevel first: the per-id bytes are precomputed
    for (int32_t id : ids) bytes += impl.id_bytes[id];
    tokens.push_back(lossy ? utf8_lossy(bytes) : std::move(bytes));
    first_step = 1;
  } else {
    for (int32_t id : ids) tokens.push_back(impl.id_token[id]);
  }
  if (!impl.has_decoder) {  // HF without a decoder: the tokens joined by spaces
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i > 0 ? " " : "") + tokens[i];
    return lossy ? utf8_lossy(joined) : joined;
  }
  for (size_t s = first_step; s < impl.decoders.size(); ++s) {
    const DecoderStep& step = impl.decoders[s];
    switch (step.kind) {
      case DecoderKind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) bytes += token_bytes(t);
        tokens.assign(1, lossy ? utf8_lossy(bytes) : std::move(bytes));
        break;
      }
      case DecoderKind::kReplace:
        for (std::string& t : tokens) t = replace_literal(t, step.pattern, step.content);
        break;
      case DecoderKind::kByteFallback:
        tokens = byte_fallback(std::move(tokens), lossy);
        break;
      case DecoderKind::kFuse: {
        std::string joined;
        for (const std::string& t : tokens) joined += t;
        tokens.assign(1, std::move(joined));
        break;
      }
      case DecoderKind::kStrip:
        for (std::string& t : tokens) t = strip_chars(t, step.content, step.start, step.stop);
        break;
      case DecoderKind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {  // token 0 loses its replacements unless "never"
          tokens[i] = replace_literal(tokens[i], step.replacement, i == 0 && step.metaspace_prepend ? "" : " ");
        }
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return lossy ? utf8_lossy(text) : text;
}

}  // namespace rlrun::engine
