#include "dsa/kernels/topk/topk_plan.h"

#include <fmt/format.h>

#include "dsa/core/checked_mode.h"

namespace dsa::kernels {

namespace {
Status mismatch(std::string_view field, const std::string& got, const std::string& want) {
  return failed_precondition(fmt::format(
      "topk: plan header {} = {}: expected {} (plan built for other inputs)", field, got, want));
}
}  // namespace

Status validate_topk_plan_header(const TopkPlanHeader& h, const int32_t* len, int32_t rows,
                                 int32_t k) {
  if (h.magic != kTopkPlanMagic) {
    return mismatch("magic", fmt::format("{:#010x}", h.magic),
                    fmt::format("{:#010x}", kTopkPlanMagic));
  }
  if (h.rows != rows) return mismatch("rows", fmt::format("{}", h.rows), fmt::format("{}", rows));
  if (h.k != k) return mismatch("k", fmt::format("{}", h.k), fmt::format("{}", k));
  if (checked_mode()) {
    if (len == nullptr && rows > 0) return invalid_argument("topk: plan check: len is null");
    uint32_t want = length_hash(len, rows);
    if (h.len_hash != want) {
      return mismatch("len_hash", fmt::format("{:#010x}", h.len_hash),
                      fmt::format("{:#010x}", want));
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
