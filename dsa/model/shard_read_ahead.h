// Reads a checkpoint's shards into the page cache ahead of the loader (issue 16: load rate).
//
// The loader copies each tensor from the shard's read-only mapping; on a cold page cache every
// page it touches is a fault that reads the disk, one readahead window at a time, and the disk
// idles while the loader copies what arrived. Advice does not fix it: MADV_WILLNEED and
// POSIX_FADV_WILLNEED read at most the device's readahead window (force_page_cache_ra caps them).
// So two threads read the shard the loader has reached and the one after it, each front to back
// with large pread() calls into a scratch buffer: the disk streams at its own rate (two streams
// keep more requests in flight than one) while the loader copies, and the loader's faults then find
// the pages in the page cache (or already on their way).
// Only speed: the loader reads the same bytes from the same mapping either way, and a shard that
// changes under it is still caught by SafetensorsFile::check_intact.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "dsa/model/checkpoint.h"

namespace dsa::model {

inline constexpr int kReadAheadThreads = 2;

class ShardReadAhead {
 public:
  // Starts the reading threads; `enabled` false makes every call a no-op (no thread).
  ShardReadAhead(const Checkpoint& checkpoint, bool enabled);
  // Stops after the read in progress (a few MB) and joins.
  ~ShardReadAhead();
  ShardReadAhead(const ShardReadAhead&) = delete;
  ShardReadAhead& operator=(const ShardReadAhead&) = delete;

  // The loader is about to read from shard `i`: it, then shard i + 1, are read ahead (each once).
  void touch(size_t i);
  // Bytes read ahead so far (the tests and the load summary).
  uint64_t bytes_read() const;

 private:
  void queue(size_t i);
  void run();

  const Checkpoint& checkpoint_;
  std::vector<bool> queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> pending_;
  bool stop_ = false;
  uint64_t bytes_read_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace dsa::model
