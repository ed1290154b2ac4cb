#include "dsa/runtime/staged_upload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "dsa/core/thread_pool.h"

namespace dsa::runtime {

StatusOr<StagedUpload> StagedUpload::create(kernels::Backend backend, size_t chunk_bytes,
                                            bool stage_on_host, ReadOptions read) {
  if (chunk_bytes == 0) return invalid_argument("staged upload: chunk_bytes = 0: must be >= 1");
  if (read.readers < 1 || read.readers > kMaxReaders) {
    return invalid_argument(
        fmt::format("staged upload: readers = {}: must be in [1, {}]", read.readers, kMaxReaders));
  }
  if (read.piece_bytes == 0) {
    return invalid_argument("staged upload: piece_bytes = 0: must be >= 1");
  }
  StagedUpload up(memory_ops(backend), chunk_bytes, read);
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
    : mem_(o.mem_), chunk_(o.chunk_), read_(o.read_), next_(o.next_), stats_(o.stats_) {
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

void StagedUpload::read_chunk(void* dst, const void* src, size_t n) {
  const size_t by_size = (n + read_.piece_bytes - 1) / read_.piece_bytes;
  const int64_t pieces =
      int64_t(std::min<size_t>(size_t(read_.readers), std::max<size_t>(by_size, 1)));
  stats_.pieces += uint64_t(pieces);
  if (pieces == 1) {
    std::memcpy(dst, src, n);
    return;
  }
  // Equal pieces, on 4 KiB boundaries where they are pages or more (whole pages of the source's
  // mapping per reader), else on 64 bytes.
  const size_t even = (n + size_t(pieces) - 1) / size_t(pieces);
  const size_t align = even >= 4096 ? 4096 : 64;
  const size_t piece = (even + align - 1) / align * align;
  // The process's pool (core/thread_pool.h) runs the pieces: nothing else runs during a load.
  parallel_for(pieces, [&](int64_t i) {
    const size_t begin = std::min(n, size_t(i) * piece), end = std::min(n, begin + piece);
    std::memcpy(static_cast<unsigned char*>(dst) + begin,
                static_cast<const unsigned char*>(src) + begin, end - begin);
  });
}

Status StagedUpload::copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  // On the CPU backend the destination is host memory: the readers copy straight into it.
  const bool host_dst = mem_->backend == kernels::Backend::kCpu;
  for (size_t off = 0; off < bytes; off += chunk_) {
    const size_t n = std::min(chunk_, bytes - off);
    if (void* slot = slots_[next_]) {
      read_chunk(slot, s + off, n);
      stats_.max_slot_fill = std::max(stats_.max_slot_fill, n);
      // The copy in flight reads the other slot; after this sync the stream holds none, so this
      // slot's refill (two chunks from now) cannot race the copy issued just below.
      DSA_RETURN_IF_ERROR(mem_->sync());
      DSA_RETURN_IF_ERROR(mem_->copy(d + off, slot, n));
      next_ ^= 1;
    } else if (host_dst) {
      read_chunk(d + off, s + off, n);
    } else {
      DSA_RETURN_IF_ERROR(mem_->copy(d + off, s + off, n));
    }
    ++stats_.chunks;
    stats_.max_chunk = std::max(stats_.max_chunk, n);
    stats_.bytes += n;
  }
  return ok_status();
}

Status StagedUpload::finish() { return mem_->sync(); }

}  // namespace dsa::runtime
