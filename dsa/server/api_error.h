// An OpenAI-shaped error: the HTTP status and the body {"error": {message, type, param, code}}.
#pragma once

#include <string>

namespace dsa::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" = null)
  std::string code;   // a machine-readable reason ("" = null)
};

inline ApiError bad_request(std::string param, std::string message) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

}  // namespace dsa::server
