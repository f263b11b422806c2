#include "common/status.h"

#include "common/check.h"

namespace rlrun {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIOError: return "I/O error";
    case StatusCode::kProtocol: return "protocol error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

void die_bad_result_access(const Status& status) {
  RLRUN_CHECK(false, "value() of a failed Result: " + status.to_string());
  __builtin_unreachable();
}

}  // namespace rlrun
