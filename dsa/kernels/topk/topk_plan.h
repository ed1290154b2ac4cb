// The top-k plan header (SPEC.md §3e). An implementation may precompute a plan (e.g. which rows
// take a multi-CTA path); the plan is a pure function of (len, K, R), rebuilt on the device every
// forward from the same `len` buffer, and starts with this header so a kernel can tell a plan built
// for other lengths from its own. The CPU reference needs no plan, but it validates one it is
// given.
#pragma once

#include <cstdint>

#include "dsa/core/host_device.h"
#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

inline constexpr uint32_t kTopkPlanMagic = 0x4B504F54;  // "TOPK" in little-endian bytes

struct TopkPlanHeader {
  uint32_t magic = 0;
  int32_t rows = 0;       // R
  int32_t k = 0;          // K
  uint32_t len_hash = 0;  // §3c len_hash over len[0..R)
};

// Written once for the host and the device builder (inv. 16), so both produce the same bits.
DSA_HD TopkPlanHeader build_topk_plan_header(const int32_t* len, int32_t rows, int32_t k) {
  TopkPlanHeader h;
  h.magic = kTopkPlanMagic;
  h.rows = rows;
  h.k = k;
  h.len_hash = length_hash(len, rows);
  return h;
}

// FailedPrecondition naming the first mismatching field. magic, R and K are checked always; the
// hash (which costs a pass over `len`) only in checked mode, as SPEC.md §3e says of the kernel.
Status validate_topk_plan_header(const TopkPlanHeader& h, const int32_t* len, int32_t rows,
                                 int32_t k);

}  // namespace dsa::kernels
