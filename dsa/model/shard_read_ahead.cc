#include "dsa/model/shard_read_ahead.h"

#include <memory>

namespace dsa::model {

namespace {
// Each pread: large enough that the kernel issues big requests, small enough to stop promptly.
constexpr size_t kReadAheadPiece = size_t(8) << 20;
}  // namespace

ShardReadAhead::ShardReadAhead(const Checkpoint& checkpoint, bool enabled)
    : checkpoint_(checkpoint), queued_(checkpoint.num_files(), false) {
  if (!enabled || checkpoint.num_files() == 0) return;
  for (int t = 0; t < kReadAheadThreads; ++t) workers_.emplace_back([this] { run(); });
}

ShardReadAhead::~ShardReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ShardReadAhead::queue(size_t i) {
  if (i >= queued_.size() || queued_[i]) return;
  queued_[i] = true;
  pending_.push_back(i);
}

void ShardReadAhead::touch(size_t i) {
  if (workers_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue(i);
    queue(i + 1);
  }
  cv_.notify_all();
}

uint64_t ShardReadAhead::bytes_read() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_read_;
}

void ShardReadAhead::run() {
  const auto scratch = std::make_unique<unsigned char[]>(kReadAheadPiece);
  for (;;) {
    size_t i;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      i = pending_.front();
      pending_.pop_front();
    }
    const SafetensorsFile& f = checkpoint_.file(i);
    for (uint64_t off = 0;;) {
      const int64_t n = f.read_at(off, scratch.get(), kReadAheadPiece);
      if (n <= 0) break;  // the end, an in-memory image, or an error the loader will report
      off += uint64_t(n);
      std::lock_guard<std::mutex> lock(mu_);
      bytes_read_ += uint64_t(n);
      if (stop_) return;
    }
  }
}

}  // namespace dsa::model
