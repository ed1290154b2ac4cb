// Reject tables: rows of (field, mutation, expected code[, message substring]) run against one
// valid params struct, each row on its own copy, so a failure names the row that broke.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dsa/core/status.h"

namespace dsa::testing {

template <typename Params>
struct RejectRow {
  std::string field;                    // what the row breaks: named in a failure
  std::function<void(Params&)> mutate;  // applied to a copy of the valid params
  StatusCode code;                      // what the op must return (kOk: a call to let through)
  std::string message = {};             // when set, a substring the Status message must contain
};

// Runs `op` on each row's mutation of `valid` and checks its Status against the row.
template <typename Params, typename Op>
void expect_rejects(const Params& valid, Op&& op, const std::vector<RejectRow<Params>>& rows) {
  for (const RejectRow<Params>& row : rows) {
    Params p = valid;
    row.mutate(p);
    const Status s = op(p);
    EXPECT_EQ(s.code(), row.code) << row.field << ": " << s.to_string();
    if (!row.message.empty()) {
      EXPECT_NE(s.message().find(row.message), std::string::npos)
          << row.field << ": " << s.to_string();
    }
  }
}

}  // namespace dsa::testing
