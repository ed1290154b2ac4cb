// GPU tests only: host <-> device copies that abort with the Status when the CUDA runtime fails
// (a harness failure, not an op result, so the test stops at once with the reason).
#pragma once

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

template <typename T>
cuda::DeviceBuffer<T> dev(const std::vector<T>& h) {
  return or_die(cuda::DeviceBuffer<T>::from_host(std::span<const T>(h)));
}

template <typename T>
std::vector<T> host(const cuda::DeviceBuffer<T>& d) {
  return or_die(d.download());
}

}  // namespace dsa::testing
