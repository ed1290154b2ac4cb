#include "dsa/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/stream.h"

namespace dsa::cuda {

StatusOr<void*> device_malloc(size_t bytes) {
  void* p = nullptr;
  if (bytes) DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return p;
}

void device_free(void* p) {
  if (p) cudaFree(p);
}

Status memcpy_async(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, current_stream()));
  return ok_status();
}

Status memcpy_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                       size_t height) {
  if (width == 0 || height == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                             cudaMemcpyDefault, current_stream()));
  return ok_status();
}

Status memset_async(void* dst, int byte, size_t bytes) {
  if (bytes == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, byte, bytes, current_stream()));
  return ok_status();
}

Status synchronize_stream() {
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(current_stream()));
  return ok_status();
}

}  // namespace dsa::cuda
