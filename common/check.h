// check.h - invariants. A failed RLRUN_CHECK is a bug in rlrun (or a device failure), never a
// user mistake: it prints file:line and the message, then aborts. User errors are Status values.
#pragma once

#include <string>

namespace rlrun {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);
}  // namespace rlrun

// RLRUN_CHECK(cond) or RLRUN_CHECK(cond, "message " + std::to_string(x))
#define RLRUN_CHECK(cond, ...)                                                               \
  do {                                                                                       \
    if (__builtin_expect(!(cond), 0))                                                        \
      ::rlrun::check_failed(__FILE__, __LINE__, #cond, ::std::string{__VA_ARGS__});          \
  } while (0)
