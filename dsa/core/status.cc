#include "dsa/core/status.h"

#include <cstdio>
#include <cstdlib>

namespace dsa {

namespace detail {
void check_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "DSA_CHECK failed: %s at %s:%d\n", expr, file, line);
  std::abort();
}
}  // namespace detail

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s(status_code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

Status invalid_argument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
Status failed_precondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
Status out_of_range(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status resource_exhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }

}  // namespace dsa
