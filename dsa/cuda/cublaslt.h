// The cuBLASLt handle and matmul workspaces every op that runs cuBLASLt matmuls shares (linear,
// batched_linear): one handle per process, one workspace per stream. Matmuls on one stream run in
// stream order, so the ops of a stream can share its scratch; two streams must not.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "dsa/core/status.h"

namespace dsa::cuda {

inline constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;

struct CublasLt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kCublasLtWorkspaceBytes of device memory for `stream`
};

// The handle (created on first use, never destroyed: the driver may be gone at exit) and the
// workspace of `stream` (allocated on the stream's first matmul, which must come before any graph
// capture on it: the warm-up). Thread-safe.
StatusOr<CublasLt> cublaslt_for(cudaStream_t stream);

// Ok, or Internal naming the op, the call and cuBLASLt's status.
Status cublaslt_status(cublasStatus_t s, const char* op, const char* call);

}  // namespace dsa::cuda
