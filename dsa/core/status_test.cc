#include "dsa/core/status.h"

#include <gtest/gtest.h>

namespace dsa {
namespace {

StatusOr<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("v = " + std::to_string(v) + ": must be > 0");
  return v;
}

Status use_positive(int v, int* out) {
  DSA_ASSIGN_OR_RETURN(*out, parse_positive(v));
  DSA_RETURN_IF_ERROR(v == 7 ? out_of_range("v = 7: seven is out") : ok_status());
  return ok_status();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(ok_status().ok());
  Status s = invalid_argument("lengths[7] = -4: lengths must be >= 0");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "InvalidArgument: lengths[7] = -4: lengths must be >= 0");
  EXPECT_EQ(s.with_context("layer 3").message(), "layer 3: lengths[7] = -4: lengths must be >= 0");
  EXPECT_TRUE(ok_status().with_context("x").ok());
}

TEST(Status, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(use_positive(5, &out).ok());
  EXPECT_EQ(out, 5);
  Status s = use_positive(-2, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "v = -2: must be > 0");
  EXPECT_EQ(use_positive(7, &out).code(), StatusCode::kOutOfRange);
}

TEST(Status, StatusOrHoldsValueOrError) {
  StatusOr<std::string> a = std::string("abc");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, "abc");
  StatusOr<std::string> b = not_found("file x");
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
}

TEST(Status, EveryCodeHasAName) {
  for (auto c : {StatusCode::kOk, StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition,
                 StatusCode::kOutOfRange, StatusCode::kResourceExhausted, StatusCode::kInternal,
                 StatusCode::kNotFound, StatusCode::kUnimplemented}) {
    EXPECT_NE(status_code_name(c), "Unknown");
  }
}

}  // namespace
}  // namespace dsa
