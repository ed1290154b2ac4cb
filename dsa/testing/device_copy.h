// GPU tests only: host <-> device copies. The vector forms abort with the Status when the CUDA
// runtime fails (a harness failure, not an op result, so the test stops at once with the reason);
// the pointer forms return it, for adapters that run a CUDA op on host buffers (`dsa check`).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <utility>
#include <vector>

#include "dsa/cuda/device_buffer.h"

namespace dsa::testing {

template <typename T>
T or_die(StatusOr<T> s) {
  if (!s.ok()) {
    std::fprintf(stderr, "fatal: %s\n", s.status().to_string().c_str());
    std::abort();
  }
  return std::move(s).value();
}

inline void or_die(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "fatal: %s\n", s.to_string().c_str());
    std::abort();
  }
}

// A device copy of host[0, count) in a buffer of at least `min_count` elements: ops reject null
// pointers even where they read nothing, so tests of empty inputs ask for one element.
template <typename T>
StatusOr<cuda::DeviceBuffer<T>> to_device(const T* host, size_t count, size_t min_count = 0) {
  DSA_ASSIGN_OR_RETURN(cuda::DeviceBuffer<T> d,
                       cuda::DeviceBuffer<T>::alloc(std::max(count, min_count)));
  if (count > 0) DSA_RETURN_IF_ERROR(d.upload(std::span<const T>(host, count)));
  return d;
}

template <typename T>
StatusOr<cuda::DeviceBuffer<T>> to_device(const std::vector<T>& h, size_t min_count = 0) {
  return to_device(h.data(), h.size(), min_count);
}

template <typename T>
cuda::DeviceBuffer<T> dev(const std::vector<T>& h, size_t min_count = 0) {
  return or_die(to_device(h, min_count));
}

// `count` device elements, uninitialised (see poison.h for outputs a test checks as untouched).
template <typename T>
cuda::DeviceBuffer<T> dev_alloc(size_t count) {
  return or_die(cuda::DeviceBuffer<T>::alloc(count));
}

template <typename T>
std::vector<T> host(const cuda::DeviceBuffer<T>& d) {
  return or_die(d.download());
}

// The first `count` elements of `d` into host[0, count) (an adapter's outputs).
template <typename T>
Status copy_to_host(const cuda::DeviceBuffer<T>& d, T* host, size_t count) {
  DSA_ASSIGN_OR_RETURN(std::vector<T> h, d.download());
  if (count > h.size()) return invalid_argument("copy_to_host: count larger than the buffer");
  std::copy(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(count), host);
  return ok_status();
}

}  // namespace dsa::testing
