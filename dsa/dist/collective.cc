#include "dsa/dist/collective.h"

#include <algorithm>

#include "dsa/core/check.h"

namespace dsa::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

void reduce_into(std::span<int64_t> acc, std::span<const int64_t> a, ReduceOp op) {
  DSA_CHECK(acc.size() == a.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    switch (op) {
      case ReduceOp::kSum:
        acc[i] += a[i];
        break;
      case ReduceOp::kMax:
        acc[i] = std::max(acc[i], a[i]);
        break;
    }
  }
}

}  // namespace dsa::dist
