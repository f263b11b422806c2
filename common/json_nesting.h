// json_nesting.h - how deep an untrusted JSON text nests, found without parsing it.
//
// A parser (and the destructor of what it built) recurses once per level: an HTTP body or a
// server's reply of a million '[' would exhaust a small thread stack. Callers refuse texts deeper
// than a bound before they parse. Brackets inside strings (escapes included) do not count.
#pragma once

#include <string_view>

namespace rlrun {

inline bool json_nesting_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace rlrun
