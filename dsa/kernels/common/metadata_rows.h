// The row formulas of the metadata builder (SPEC.md §4.3, §4.5), written once as DSA_HD functions:
// the host builder (runtime/metadata_builder.cc) calls them per request, and so does the step
// commit op (kernels/step_commit/) that rebuilds a draft decode's rows on the device from the
// accepted counts, so the two agree byte for byte (inv. 16). Here, below the runtime, because an
// op's kernel calls them.
#pragma once

#include <cstdint>

#include "dsa/core/host_device.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

// Raw views of the row buffers of ForwardMetadata.
struct RowArrays {
  int32_t* row_len;
  int32_t* row_topk_len;
  int32_t* row_req;
  int32_t* row_page;
  int32_t* positions;
  int32_t* write_slot;
  int32_t* ks;
  int32_t* ke;
};

// Rows [first_row, first_row + new_len) of real request b: row j sits at cached_len + j and sees
// cached_len + j + 1 positions. kv_begin >= 0 puts the request on EXTEND's ragged path (its keys
// gathered at [kv_begin, kv_begin + kv_len)); -1 = paged path (ks = ke = 0).
DSA_HD void fill_request_rows(RowArrays a, const PageTable& pt, int32_t b, int32_t req_slot,
                              int32_t cached_len, int32_t new_len, int32_t first_row,
                              int32_t kv_begin, int32_t topk) {
  // Eight rows at a time: their page-table reads first, then their stores, so that on the GPU
  // (the step commit, one thread per request) the reads are in flight together rather than each
  // behind the previous row's stores.
  constexpr int32_t kChunk = 8;
  for (int32_t j0 = 0; j0 < new_len; j0 += kChunk) {
    int32_t slot[kChunk];
    DSA_HD_UNROLL
    for (int32_t u = 0; u < kChunk; ++u) {
      slot[u] =
          j0 + u < new_len ? slot_of_position(pt, req_slot, cached_len + j0 + u, kPageSize) : -1;
    }
    DSA_HD_UNROLL
    for (int32_t u = 0; u < kChunk; ++u) {
      const int32_t j = j0 + u;
      if (j >= new_len) continue;
      const int32_t r = first_row + j;
      const int32_t pos = cached_len + j;
      const int32_t len = pos + 1 > 0 ? pos + 1 : 0;  // defensive clamp; real cached_len >= 0
      a.row_len[r] = len;
      a.row_topk_len[r] = len < topk ? len : topk;
      a.row_req[r] = b;
      a.row_page[r] = req_slot;
      a.positions[r] = pos;
      a.write_slot[r] = slot[u];
      a.ks[r] = kv_begin >= 0 ? kv_begin : 0;
      a.ke[r] = kv_begin >= 0 ? kv_begin + len : 0;
    }
  }
}

// Rows of a padded request: constants, never derived from the row formula (SPEC.md §4.5).
DSA_HD void fill_padded_rows(RowArrays a, int32_t b, int32_t first_row, int32_t count) {
  for (int32_t r = first_row; r < first_row + count; ++r) {
    a.row_len[r] = 0;
    a.row_topk_len[r] = 0;
    a.row_req[r] = b;
    a.row_page[r] = 0;
    a.positions[r] = 0;
    a.write_slot[r] = -1;
    a.ks[r] = 0;
    a.ke[r] = 0;
  }
}

}  // namespace dsa::kernels
