// Status and Result<T>: the one error vocabulary used at every boundary above
// the kernels. A Status is ok or carries a code and a one-line message that
// says what was wrong and where (file, offset, field). No exceptions cross a
// library boundary; bad input is always reported through these types.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace braid {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed
  kNotFound,         // a named thing (file, tensor, key) does not exist
  kCorruption,       // a file's contents are inconsistent or truncated
  kUnsupported,      // well-formed, but a feature we do not implement
  kIoError,          // the operating system refused an operation
  kOutOfRange,       // a value is outside the allowed bounds
  kResourceExhausted,
  kCancelled,
  kInternal,
  kTooLarge,  // an input over a size limit (unlike ResourceExhausted, no retry helps)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status TooLarge(std::string m) { return {StatusCode::kTooLarge, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: message", or "ok".
  std::string ToString() const;
  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "Result built from an ok Status needs a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace braid

#define BRAID_CONCAT_INNER(a, b) a##b
#define BRAID_CONCAT(a, b) BRAID_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not ok.
#define BRAID_RETURN_IF_ERROR(expr)      \
  do {                                   \
    ::braid::Status _braid_s = (expr);   \
    if (!_braid_s.ok()) return _braid_s; \
  } while (0)

// `BRAID_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define BRAID_ASSIGN_OR_RETURN(lhs, expr) \
  BRAID_ASSIGN_OR_RETURN_IMPL(BRAID_CONCAT(_braid_r_, __LINE__), lhs, expr)
#define BRAID_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
