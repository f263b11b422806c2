// status.h - errors a user can cause are values, not exceptions or aborts.
//
// A Status is either ok or carries a code and a message that names the thing at fault and says
// what to do ("config.yaml:12: unknown key `max_async_rollot` (did you mean `max_async_rollout`?)").
// Result<T> holds a T or a non-ok Status. Broken invariants use RLRUN_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace rlrun {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad config, bad CLI flag, bad value
  kNotFound,         // missing file, unknown tensor
  kIOError,          // read/write/network failure
  kProtocol,         // malformed, truncated or wrong-version message
  kUnavailable,      // port in use, peer gone
  kTimeout,
  kResourceExhausted,
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "message" for user errors; "<code>: message" where the code adds information.
  std::string to_string() const;

  // Prefixes the message with context ("loading model.safetensors: ...").
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
inline Status protocol_error(std::string m) { return {StatusCode::kProtocol, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status timeout_error(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or an error. Accessing value() of an error is an invariant violation (aborts).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}    // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() &;
  const T& value() const&;
  T&& value() &&;
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

[[noreturn]] void die_bad_result_access(const Status& status);

template <class T>
T& Result<T>::value() & {
  if (!value_) die_bad_result_access(status_);
  return *value_;
}
template <class T>
const T& Result<T>::value() const& {
  if (!value_) die_bad_result_access(status_);
  return *value_;
}
template <class T>
T&& Result<T>::value() && {
  if (!value_) die_bad_result_access(status_);
  return std::move(*value_);
}

}  // namespace rlrun

#define RLRUN_STATUS_CONCAT_INNER(a, b) a##b
#define RLRUN_STATUS_CONCAT(a, b) RLRUN_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is not ok.
#define RLRUN_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::rlrun::Status rlrun_status_ = (expr);          \
    if (!rlrun_status_.ok()) return rlrun_status_;   \
  } while (0)

// `RLRUN_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result, or returns its Status.
#define RLRUN_ASSIGN_OR_RETURN(lhs, expr) \
  RLRUN_ASSIGN_OR_RETURN_IMPL(RLRUN_STATUS_CONCAT(rlrun_result_, __LINE__), lhs, expr)
#define RLRUN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
