// Status / StatusOr: the one error model of dsa (ARCHITECTURE.md §3, SPEC.md §1.3).
// Functions that can fail on input return these; messages name the argument and the value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "dsa/core/check.h"

namespace dsa {

// The codes of SPEC.md §1.3, plus kOk and kNotFound (a missing file or tensor) and
// kUnimplemented (a backend slot that is not built).
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kFailedPrecondition,
  kOutOfRange,
  kResourceExhausted,
  kInternal,
  kNotFound,
  kUnimplemented,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: lengths[7] = -4: lengths must be >= 0"
  std::string to_string() const;

  // Prepends context ("while loading x: ") to an error; no-op on OK.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
Status invalid_argument(std::string message);
Status failed_precondition(std::string message);
Status out_of_range(std::string message);
Status resource_exhausted(std::string message);
Status internal_error(std::string message);
Status not_found(std::string message);
Status unimplemented(std::string message);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design, like absl.
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    DSA_CHECK(!status_.ok());
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    DSA_CHECK(ok());
    return *value_;
  }
  const T& value() const& {
    DSA_CHECK(ok());
    return *value_;
  }
  T&& value() && {
    DSA_CHECK(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace dsa

#define DSA_STATUS_CONCAT_INNER_(a, b) a##b
#define DSA_STATUS_CONCAT_(a, b) DSA_STATUS_CONCAT_INNER_(a, b)

#define DSA_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::dsa::Status dsa_status_tmp_ = (expr);            \
    if (!dsa_status_tmp_.ok()) return dsa_status_tmp_; \
  } while (0)

#define DSA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// DSA_ASSIGN_OR_RETURN(auto x, make_x());
#define DSA_ASSIGN_OR_RETURN(lhs, expr) \
  DSA_ASSIGN_OR_RETURN_IMPL_(DSA_STATUS_CONCAT_(dsa_statusor_, __LINE__), lhs, expr)
