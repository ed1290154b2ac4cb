// Device helpers both grouped linear kernels share (grouped_linear_kernel.cuh, bf16;
// grouped_linear_fp8_kernel.cuh, FP8): 16-byte cp.async copies and the pair row rule. Inline
// functions only, so each kernel's translation unit may include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsa::kernels::grouped_linear_detail {

// ---- cp.async: 16-byte copies global -> shared, zero-filling when src_bytes = 0 ----

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The pair's row on the indexed side, or -1 when out of [0, rows) (unchecked: skipped).
__device__ __forceinline__ int32_t pair_row(const int32_t* index, int32_t i, int32_t rows) {
  const int32_t r = index != nullptr ? index[i] : i;
  return r >= 0 && r < rows ? r : -1;
}

}  // namespace dsa::kernels::grouped_linear_detail
