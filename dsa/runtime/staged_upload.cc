#include "dsa/runtime/staged_upload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace dsa::runtime {

StatusOr<StagedUpload> StagedUpload::create(kernels::Backend backend, size_t chunk_bytes,
                                            bool stage_on_host) {
  if (chunk_bytes == 0) return invalid_argument("staged upload: chunk_bytes = 0: must be >= 1");
  StagedUpload up(memory_ops(backend), chunk_bytes);
  // The CPU backend's memory is the host's: a slot would only add a copy.
  if (backend == kernels::Backend::kCpu && !stage_on_host) return up;
  for (void*& slot : up.slots_) {
    StatusOr<void*> p = up.mem_->alloc_staging(chunk_bytes);
    if (!p.ok()) {
      return Status(p.status().code(), fmt::format("staged upload: {} bytes of staging: {}",
                                                   chunk_bytes, p.status().message()));
    }
    slot = *p;
  }
  up.stats_.slot_bytes = chunk_bytes;
  up.stats_.staging_bytes = 2 * chunk_bytes;
  return up;
}

StagedUpload::StagedUpload(StagedUpload&& o) noexcept
    : mem_(o.mem_), chunk_(o.chunk_), next_(o.next_), stats_(o.stats_) {
  for (int i = 0; i < 2; ++i) slots_[i] = std::exchange(o.slots_[i], nullptr);
}

StagedUpload::~StagedUpload() { release(); }

void StagedUpload::release() {
  if (slots_[0] == nullptr && slots_[1] == nullptr) return;
  (void)mem_->sync();  // a copy in flight may still read a slot; nothing to report it to here
  for (void*& slot : slots_) {
    if (slot) mem_->release_staging(slot);
    slot = nullptr;
  }
}

Status StagedUpload::copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t off = 0; off < bytes; off += chunk_) {
    const size_t n = std::min(chunk_, bytes - off);
    const void* from = s + off;
    if (void* slot = slots_[next_]) {
      std::memcpy(slot, s + off, n);
      stats_.max_slot_fill = std::max(stats_.max_slot_fill, n);
      // The copy in flight reads the other slot; after this sync the stream holds none, so this
      // slot's refill (two chunks from now) cannot race the copy issued just below.
      DSA_RETURN_IF_ERROR(mem_->sync());
      from = slot;
      next_ ^= 1;
    }
    DSA_RETURN_IF_ERROR(mem_->copy(d + off, from, n));
    ++stats_.chunks;
    stats_.max_chunk = std::max(stats_.max_chunk, n);
    stats_.bytes += n;
  }
  return ok_status();
}

Status StagedUpload::finish() { return mem_->sync(); }

}  // namespace dsa::runtime
