// An owning device allocation (cudaMalloc / cudaFree) with typed host<->device copies. Used by
// tests, benchmarks and the CUDA runtime's persistent buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "dsa/cuda/cuda_check.h"

namespace dsa::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static StatusOr<DeviceBuffer> alloc(size_t count) {
    DeviceBuffer b;
    b.count_ = count;
    if (count) DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.ptr_, count * sizeof(T)));
    return b;
  }
  static StatusOr<DeviceBuffer> from_host(std::span<const T> host) {
    DSA_ASSIGN_OR_RETURN(DeviceBuffer b, alloc(host.size()));
    DSA_RETURN_IF_ERROR(b.upload(host));
    return b;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), count_(o.count_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }

  T* data() const { return ptr_; }
  size_t size() const { return count_; }

  Status upload(std::span<const T> host) {
    if (host.size() > count_)
      return invalid_argument("DeviceBuffer::upload: host span larger than the buffer");
    DSA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return ok_status();
  }
  StatusOr<std::vector<T>> download() const {
    std::vector<T> host(count_);
    DSA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (poisoning outputs before a kernel runs).
  Status fill_bytes(int byte) {
    DSA_CUDA_RETURN_IF_ERROR(cudaMemset(ptr_, byte, count_ * sizeof(T)));
    return ok_status();
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace dsa::cuda
