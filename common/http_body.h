// http_body.h - an untrusted HTTP reply read under a size cap, and a few of its bytes for a
// message. Shared by the clients of servers users bring (reward server, environment server).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rlrun {

struct CappedBody {
  std::string bytes;
  size_t max_bytes = 0;
  bool too_big = false;  // more came than max_bytes: the transfer was stopped
};

// A libcurl CURLOPT_WRITEFUNCTION whose CURLOPT_WRITEDATA is a CappedBody*: past max_bytes it
// sets too_big and returns 0, and libcurl ends the transfer with CURLE_WRITE_ERROR.
inline size_t append_capped(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<CappedBody*>(user);
  const size_t n = size * count;
  if (body->bytes.size() + n > body->max_bytes) {
    body->too_big = true;
    return 0;
  }
  body->bytes.append(data, n);
  return n;
}

// The first `limit` bytes of an untrusted body, printable ASCII only (others as '?'), with the
// body's size when it is longer; "(empty)" for none.
inline std::string printable_snippet(std::string_view body, size_t limit = 200) {
  std::string s;
  for (char c : body.substr(0, limit)) s += (c >= ' ' && c <= '~') ? c : '?';
  if (body.size() > limit) s += "... (" + std::to_string(body.size()) + " bytes)";
  return s.empty() ? "(empty)" : s;
}

}  // namespace rlrun
