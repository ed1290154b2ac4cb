// The list of (op, shape) cases `dsa check` runs against one op table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"

namespace dsa::cli {

enum class ShapeClass { kSmall, kV32 };

struct CheckCase {
  std::string op;
  ShapeClass shape_class;
  std::string shape;  // human-readable dimensions
  std::function<Status(uint64_t seed)> run;
};

std::vector<CheckCase> check_cases(const kernels::OpTable& ops);

}  // namespace dsa::cli
