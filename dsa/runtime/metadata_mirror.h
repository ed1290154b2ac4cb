// One forward's metadata arrays (SPEC.md §4.4) and page table where the backend's ops read them.
// The host builder stays the one writer (ForwardMetadata); for the CPU backend the arrays are read
// in place, for CUDA each array is copied (one async copy each) into buffers allocated once at
// capacity before the layers run. Host-side decisions (header, loop bounds) keep reading the
// ForwardMetadata itself.
#pragma once

#include <cstdint>

#include "dsa/kernels/common/paged_cache.h"
#include "dsa/runtime/buffer.h"
#include "dsa/runtime/forward_metadata.h"

namespace dsa::runtime {

struct MetadataArrays {
  const int32_t *row_len = nullptr, *row_topk_len = nullptr, *row_req = nullptr,
                *row_page = nullptr, *positions = nullptr, *write_slot = nullptr, *ks = nullptr,
                *ke = nullptr, *sample_row = nullptr;
  const int32_t *req_slot = nullptr, *req_kv_len = nullptr, *cu_q = nullptr, *cu_kv = nullptr;
  const int32_t *pg_req_slot = nullptr, *pg_row_len = nullptr, *pg_row = nullptr;
  const int32_t* schedule = nullptr;
  kernels::PageTable page_table;
};

// The arrays of `m` and `pt` in place (host memory).
MetadataArrays host_arrays(const ForwardMetadata& m, const kernels::PageTable& pt);

class MetadataMirror {
 public:
  explicit MetadataMirror(kernels::Backend backend) : backend_(backend) {}
  Status upload(const ForwardMetadata& m, const kernels::PageTable& pt);
  const MetadataArrays& arrays() const { return arrays_; }

 private:
  kernels::Backend backend_;
  Buffer<int32_t> block_;
  MetadataArrays arrays_;
};

}  // namespace dsa::runtime
