// One forward's inputs where the backend's ops read them (SPEC.md §5, replay step 1): the
// metadata arrays (§4.4), the page table, the token ids and, for the MTP layer, the hidden rows.
// The host builder stays the one writer (ForwardMetadata); upload() packs everything into one
// staging block (page-locked for CUDA) and issues ONE asynchronous copy into a backend block whose
// layout is fixed when the mirror is created, from the MetadataConfig's capacities. So every
// address a captured graph holds stays valid, and per-step values reach kernels only through these
// buffers (inv. 18). The schedule region is rebuilt by the forward itself, on the backend, from
// the very row_len it reads (rebuild_schedule, inv. 15). The copy reads the staging block
// asynchronously: the caller synchronises (reads its results back) before the next upload.
#pragma once

#include <cstdint>
#include <span>

#include "dsa/core/dtype.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/op_table.h"
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
  // hidden_size: row width of the MTP hidden input (0 = none).
  MetadataMirror(kernels::Backend backend, const MetadataConfig& config, int64_t hidden_size);
  MetadataMirror(const MetadataMirror&) = delete;
  MetadataMirror& operator=(const MetadataMirror&) = delete;
  ~MetadataMirror();

  // Allocates the staging and backend blocks (once, before the first upload).
  Status allocate(const kernels::PageTable& pt);
  // tokens: >= rows_pad ids; hidden: empty, or >= rows_pad rows of hidden_size.
  Status upload(const ForwardMetadata& m, const kernels::PageTable& pt,
                std::span<const int32_t> tokens, std::span<const bf16> hidden = {});
  // §3c on the backend over the uploaded row_len (pg_row_len for EXTEND) into the schedule region.
  Status rebuild_schedule(const kernels::OpTable& ops, const ForwardMetadata& m) const;

  const MetadataArrays& arrays() const { return arrays_; }
  const int32_t* tokens() const { return tokens_; }
  const bf16* hidden() const { return hidden_; }

 private:
  kernels::Backend backend_;
  MetadataConfig config_;
  int64_t hidden_size_;
  size_t fixed_words_ = 0;   // metadata fields + page table + tokens, at capacity
  size_t total_words_ = 0;   // + hidden rows at capacity
  void* staging_ = nullptr;  // host, total_words_ int32
  Buffer<int32_t> block_;
  MetadataArrays arrays_;
  int32_t* schedule_ = nullptr;
  const int32_t* tokens_ = nullptr;
  const bf16* hidden_ = nullptr;
};

}  // namespace dsa::runtime
