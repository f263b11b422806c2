#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace rlrun {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "rlrun: internal error at %s:%d: check `%s` failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace rlrun
