// Host bytes into backend memory through a bounded staging area, for the checkpoint load
// (model/weight_stream.h): a tensor goes from the shard's mapping to its backend buffer in chunks
// of at most `chunk_bytes`, so the host never holds more than two chunks whatever the checkpoint
// size. On CUDA the two chunks are page-locked slots (MemoryOps::alloc_staging) used in turn:
// while one slot's cudaMemcpyAsync runs, the host fills the other, and a slot is refilled only
// after the stream has drained the copy that read it (one sync before each copy is issued: the
// copy then in flight reads the other slot). On the CPU backend the destination is host memory
// already, so chunks are copied straight from the source (no third copy) unless `stage_on_host`
// asks for the CUDA path's slots, which is how the tests exercise that logic without a GPU.
//
// A chunk is read in `readers` pieces at once, by the process thread pool: from a file mapping,
// each thread's page faults are reads of the disk, so several in flight keep the disk's queue full
// where one memcpy waits for one readahead window at a time, and several copies from the page
// cache run faster than one (issue 16's load rate; model/shard_read_ahead.h keeps the disk busy
// ahead of them). Only speed: the bytes and the bound are the same.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/runtime/backend_memory.h"

namespace dsa::runtime {

// How a chunk is read from its source.
inline constexpr int kMaxReaders = 64;

struct ReadOptions {
  // Pieces one chunk is cut into, read at once by the process's thread pool (core/thread_pool.h:
  // as many at a time as it has threads), >= 1.
  int readers = 1;
  // Smallest piece one reader takes: below ~1 MiB a piece is all fixed cost. Tests set it small
  // to split 4 KiB chunks.
  size_t piece_bytes = size_t(1) << 20;
};

// What an upload did, counted by StagedUpload itself (the bound is a checked property, not a hope).
struct StagingStats {
  uint64_t bytes = 0;        // copied into backend memory
  uint64_t chunks = 0;       // copies issued
  size_t max_chunk = 0;      // largest single copy
  size_t slot_bytes = 0;     // size of each staging slot (0: copied straight from the source)
  size_t max_slot_fill = 0;  // most bytes ever written into one slot (<= slot_bytes)
  size_t staging_bytes = 0;  // host memory held for staging: 2 * slot_bytes, or 0
  uint64_t pieces = 0;       // reads of a chunk's piece by one reader (>= chunks read in parallel)
};

class StagedUpload {
 public:
  // chunk_bytes >= 1, read.readers >= 1, read.piece_bytes >= 1; InvalidArgument otherwise. The
  // slots (when staged) are allocated here.
  static StatusOr<StagedUpload> create(kernels::Backend backend, size_t chunk_bytes,
                                       bool stage_on_host = false, ReadOptions read = {});
  StagedUpload(StagedUpload&& o) noexcept;
  StagedUpload& operator=(StagedUpload&&) = delete;
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;
  ~StagedUpload();  // waits for the copies in flight before the slots are released

  // [src, src + bytes) (host memory) into dst (backend memory). `src` may be reused or unmapped
  // once this returns: every byte has been copied into a slot or into dst by then.
  Status copy(void* dst, const void* src, size_t bytes);
  // Every copy issued has landed in backend memory.
  Status finish();
  const StagingStats& stats() const { return stats_; }

 private:
  StagedUpload(const MemoryOps& mem, size_t chunk_bytes, ReadOptions read)
      : mem_(&mem), chunk_(chunk_bytes), read_(read) {}
  void release();
  // [src, src + n) into host memory at dst, in up to read_.readers pieces read at once.
  void read_chunk(void* dst, const void* src, size_t n);

  const MemoryOps* mem_;
  size_t chunk_;
  ReadOptions read_;
  void* slots_[2] = {nullptr, nullptr};  // null: copy straight from the source
  int next_ = 0;
  StagingStats stats_;
};

}  // namespace dsa::runtime
