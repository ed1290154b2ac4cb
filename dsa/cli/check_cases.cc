#include "dsa/cli/check_cases.h"

#include "dsa/kernels/indexer_write/indexer_write_check.h"

namespace dsa::cli {

using namespace dsa::kernels;  // NOLINT: the case table names many ops

std::vector<CheckCase> check_cases(const OpTable& ops) {
  std::vector<CheckCase> cases;
  auto add = [&](std::string op, ShapeClass c, std::string shape,
                 std::function<Status(uint64_t)> run) {
    cases.push_back({std::move(op), c, std::move(shape), std::move(run)});
  };
  const auto kS = ShapeClass::kSmall;
  const auto kV = ShapeClass::kV32;

  add("indexer_write", kS, "T=37 D_i=128",
      [&](uint64_t s) { return check_indexer_write(ops.indexer_write, 37, s); });
  add("indexer_write", kV, "T=4096 D_i=128",
      [&](uint64_t s) { return check_indexer_write(ops.indexer_write, 4096, s); });
  (void)kV;
  return cases;
}

}  // namespace dsa::cli
