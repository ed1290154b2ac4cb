// What every CUDA launcher shares after its own validation (SPEC.md §1.3): the dynamic
// shared-memory opt-in, the error word a kernel reports into, and the launch ending (launch error,
// then the checked-mode device check). Compiled by nvcc: no fmt here (see launch_checks.h).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <source_location>
#include <string>
#include <string_view>

#include "dsa/core/status.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"

namespace dsa::cuda {

// A cudaFuncSetAttribute(MaxDynamicSharedMemorySize) result as a Status located at the launcher.
inline Status smem_opt_in_status(cudaError_t err, std::source_location where) {
  if (err == cudaSuccess) return ok_status();
  return cuda_status(err, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", where.file_name(),
                     static_cast<int>(where.line()));
}

// Lets `kernel` take `bytes` of dynamic shared memory (above 48 KB it must opt in), on every call:
// for kernels whose size varies from call to call.
template <typename Kernel>
Status allow_dynamic_smem(Kernel* kernel, size_t bytes,
                          std::source_location where = std::source_location::current()) {
  return smem_opt_in_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)),
      where);
}

// The same once per kernel and process, for kernels of a fixed size: the first call's result is
// kept. Not a stream operation, so harmless inside a graph capture.
template <auto kKernel>
Status allow_dynamic_smem_once(size_t bytes,
                               std::source_location where = std::source_location::current()) {
  static const cudaError_t err = cudaFuncSetAttribute(
      kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  return smem_opt_in_status(err, where);
}

// The error word for a kernel that reports only in checked mode: null when unchecked (the kernel
// then skips its checks, and nothing is allocated or read).
inline StatusOr<DeviceErrorWord*> error_word_if(bool checked) {
  if (!checked) return static_cast<DeviceErrorWord*>(nullptr);
  return device_error_word();
}

// After a <<<...>>> launch: a configuration error surfaces at once through cudaGetLastError, as
// Internal "launch <kernel> failed: ...".
inline Status launch_error(std::string_view kernel,
                           std::source_location where = std::source_location::current()) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return ok_status();
  const std::string call = "launch " + std::string(kernel);
  return cuda_status(err, call.c_str(), where.file_name(), static_cast<int>(where.line()));
}

// The ending of a launcher: the launch error, then in checked mode the device error word's Status
// (take_device_error synchronises, unless a DeferDeviceErrors lives or the stream captures). An
// unchecked launch returns at once: no synchronisation.
inline Status end_launch(std::string_view kernel, bool checked, std::string_view context,
                         std::source_location where = std::source_location::current()) {
  DSA_RETURN_IF_ERROR(launch_error(kernel, where));
  if (checked) return take_device_error(context);
  return ok_status();
}

// Multiprocessors of the current device, for grids sized to fill the machine. Launchers call it
// on every launch, so the attribute is cached per device (it cannot change while the process
// lives).
inline StatusOr<int> sm_count() {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cached[kCachedDevices] = {};
  int device = 0, sms = 0;
  DSA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable) {
    sms = cached[device].load(std::memory_order_relaxed);
    if (sms > 0) return sms;
  }
  DSA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (cacheable) cached[device].store(sms, std::memory_order_relaxed);
  return sms;
}

}  // namespace dsa::cuda
