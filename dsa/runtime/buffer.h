// An owning, typed, zero-filled allocation in a backend's memory (host for the CPU backend, device
// for CUDA): weights, cache pools, metadata mirrors and scratch that ops read through raw pointers.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include "dsa/core/status.h"
#include "dsa/runtime/backend_memory.h"

namespace dsa::runtime {

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  static StatusOr<Buffer> alloc(kernels::Backend backend, size_t count) {
    Buffer b;
    b.mem_ = &memory_ops(backend);
    DSA_ASSIGN_OR_RETURN(void* p, b.mem_->alloc(count * sizeof(T)));
    b.ptr_ = static_cast<T*>(p);
    b.count_ = count;
    return b;
  }
  static StatusOr<Buffer> from_host(kernels::Backend backend, std::span<const T> host) {
    DSA_ASSIGN_OR_RETURN(Buffer b, alloc(backend, host.size()));
    DSA_RETURN_IF_ERROR(b.upload(host));
    return b;
  }
  Buffer(Buffer&& o) noexcept
      : mem_(o.mem_), ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(mem_, o.mem_);
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (ptr_) mem_->release(ptr_);
  }

  T* data() const { return ptr_; }
  size_t size() const { return count_; }

  // Host -> buffer elements [offset, offset + host.size()).
  Status upload(std::span<const T> host, size_t offset = 0) {
    if (offset + host.size() > count_) return invalid_argument("Buffer::upload: out of range");
    return mem_->copy(ptr_ + offset, host.data(), host.size() * sizeof(T));
  }
  // Buffer elements [offset, offset + host.size()) -> host; synchronises.
  Status download(std::span<T> host, size_t offset = 0) const {
    if (offset + host.size() > count_) return invalid_argument("Buffer::download: out of range");
    DSA_RETURN_IF_ERROR(mem_->copy(host.data(), ptr_ + offset, host.size() * sizeof(T)));
    return mem_->sync();
  }

 private:
  const MemoryOps* mem_ = nullptr;
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace dsa::runtime
