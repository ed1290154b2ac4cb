// The paged cache allocator (SPEC.md §2.5): one page id addresses the same 64 tokens in every pool
// of every layer (MLA latent and indexer, target and MTP). Page 0 is the reserved dummy page that
// padded rows point at; it is never handed out. Request slots (page-table rows) are allocated the
// same way, row 0 reserved. Running out is ResourceExhausted, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::runtime {

// A free list over ids [1, capacity); id 0 is reserved.
class IdAllocator {
 public:
  IdAllocator(std::string_view what, int32_t capacity);
  StatusOr<int32_t> allocate();
  // All or nothing: either `count` ids or ResourceExhausted with nothing taken.
  StatusOr<std::vector<int32_t>> allocate(int32_t count);
  Status free(int32_t id);
  int32_t capacity() const { return capacity_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }

 private:
  std::string what_;
  int32_t capacity_;
  std::vector<int32_t> free_;  // popped from the back, lowest ids first
  std::vector<uint8_t> in_use_;
};

// The host page table [num_rows, width] int32 with row 0 all zeros and unallocated entries 0, plus
// the page and request-slot allocators that fill it.
class PagedCacheManager {
 public:
  PagedCacheManager(int32_t num_pages, int32_t num_rows, int32_t width);

  // Takes a free request slot (page-table row); its entries are all 0.
  StatusOr<int32_t> open_request();
  // Makes positions [0, length) of the request addressable: allocates the missing pages.
  Status reserve(int32_t req_slot, int32_t length);
  // Frees every page of the request and its slot.
  Status close_request(int32_t req_slot);

  int32_t pages_held(int32_t req_slot) const;
  int32_t num_free_pages() const { return pages_.num_free(); }
  int32_t num_pages() const { return pages_.capacity(); }
  int32_t width() const { return width_; }
  int32_t num_rows() const { return slots_.capacity(); }

  kernels::PageTable page_table() const;
  std::span<const int32_t> row(int32_t req_slot) const;
  // Per row, the value of a change counter at its last change (0: never changed): a copy of the
  // table elsewhere (the metadata mirror's, in backend memory) is brought up to date by the rows
  // whose version differs from the one it copied, not by the whole table (SPEC.md §6.7's page-table
  // patch list).
  std::span<const uint64_t> row_versions() const { return versions_; }

 private:
  IdAllocator pages_;
  IdAllocator slots_;
  int32_t width_;
  std::vector<int32_t> table_;  // [num_rows, width]
  std::vector<int32_t> held_;   // pages held per row
  std::vector<uint64_t> versions_;
  uint64_t changes_ = 0;
  void touch(int32_t req_slot) { versions_[static_cast<size_t>(req_slot)] = ++changes_; }
};

}  // namespace dsa::runtime
