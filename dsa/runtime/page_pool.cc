#include "dsa/runtime/page_pool.h"

#include <fmt/format.h>

namespace dsa::runtime {

using kernels::kPageSize;

IdAllocator::IdAllocator(std::string_view what, int32_t capacity)
    : what_(what), capacity_(capacity), in_use_(static_cast<size_t>(capacity), 0) {
  DSA_CHECK(capacity >= 1);
  in_use_[0] = 1;  // id 0 is reserved
  for (int32_t id = capacity - 1; id >= 1; --id) free_.push_back(id);
}

StatusOr<int32_t> IdAllocator::allocate() {
  if (free_.empty()) {
    return resource_exhausted(
        fmt::format("{}: all {} allocatable ids are in use", what_, capacity_ - 1));
  }
  int32_t id = free_.back();
  free_.pop_back();
  in_use_[static_cast<size_t>(id)] = 1;
  return id;
}

StatusOr<std::vector<int32_t>> IdAllocator::allocate(int32_t count) {
  if (count < 0) return invalid_argument(fmt::format("{}: count = {}: must be >= 0", what_, count));
  if (count > num_free()) {
    return resource_exhausted(fmt::format("{}: {} ids requested, {} free of {}", what_, count,
                                          num_free(), capacity_ - 1));
  }
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back(*allocate());
  return ids;
}

Status IdAllocator::free(int32_t id) {
  if (id <= 0 || id >= capacity_ || !in_use_[static_cast<size_t>(id)]) {
    return invalid_argument(fmt::format("{}: free({}): not an allocated id", what_, id));
  }
  in_use_[static_cast<size_t>(id)] = 0;
  free_.push_back(id);
  return ok_status();
}

PagedCacheManager::PagedCacheManager(int32_t num_pages, int32_t num_rows, int32_t width)
    : pages_("pages", num_pages),
      slots_("request slots", num_rows),
      width_(width),
      table_(static_cast<size_t>(num_rows) * static_cast<size_t>(width), 0),
      held_(static_cast<size_t>(num_rows), 0),
      versions_(static_cast<size_t>(num_rows), 0) {}

StatusOr<int32_t> PagedCacheManager::open_request() { return slots_.allocate(); }

Status PagedCacheManager::reserve(int32_t req_slot, int32_t length) {
  if (req_slot <= 0 || req_slot >= num_rows()) {
    return invalid_argument(
        fmt::format("reserve: req_slot = {}: must be in [1, {})", req_slot, num_rows()));
  }
  if (length < 0 || int64_t{length} > int64_t{width_} * kPageSize) {
    return resource_exhausted(
        fmt::format("reserve: length = {}: exceeds the page-table width {} pages x {} tokens",
                    length, width_, kPageSize));
  }
  int32_t need = (length + kPageSize - 1) / kPageSize;
  int32_t& held = held_[static_cast<size_t>(req_slot)];
  if (need <= held) return ok_status();
  DSA_ASSIGN_OR_RETURN(std::vector<int32_t> pages, pages_.allocate(need - held));
  for (int32_t p : pages) table_[static_cast<size_t>(req_slot) * width_ + held++] = p;
  touch(req_slot);
  return ok_status();
}

Status PagedCacheManager::close_request(int32_t req_slot) {
  if (req_slot <= 0 || req_slot >= num_rows()) {
    return invalid_argument(
        fmt::format("close_request: req_slot = {}: must be in [1, {})", req_slot, num_rows()));
  }
  int32_t& held = held_[static_cast<size_t>(req_slot)];
  touch(req_slot);  // first: a failure below leaves entries zeroed already
  for (int32_t i = 0; i < held; ++i) {
    int32_t& entry = table_[static_cast<size_t>(req_slot) * width_ + i];
    DSA_RETURN_IF_ERROR(pages_.free(entry));
    entry = 0;
  }
  held = 0;
  return slots_.free(req_slot);
}

int32_t PagedCacheManager::pages_held(int32_t req_slot) const {
  return held_[static_cast<size_t>(req_slot)];
}

kernels::PageTable PagedCacheManager::page_table() const {
  return kernels::PageTable{table_.data(), num_rows(), width_, num_pages()};
}

std::span<const int32_t> PagedCacheManager::row(int32_t req_slot) const {
  return std::span<const int32_t>(table_).subspan(static_cast<size_t>(req_slot) * width_,
                                                  static_cast<size_t>(width_));
}

}  // namespace dsa::runtime
