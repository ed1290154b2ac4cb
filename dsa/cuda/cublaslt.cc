#include "dsa/cuda/cublaslt.h"

#include <map>
#include <mutex>
#include <string>

#include "dsa/cuda/cuda_check.h"

namespace dsa::cuda {

namespace {
std::mutex g_mutex;
cublasLtHandle_t g_handle = nullptr;
std::map<cudaStream_t, void*>* g_workspaces = nullptr;  // process lifetime, as the handle
}  // namespace

Status cublaslt_status(cublasStatus_t s, const char* op, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return ok_status();
  return internal_error(std::string(op) + ": " + call + " failed: " + cublasLtGetStatusName(s) +
                        " (" + cublasLtGetStatusString(s) + ")");
}

StatusOr<CublasLt> cublaslt_for(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_handle == nullptr) {
    cublasLtHandle_t h = nullptr;
    DSA_RETURN_IF_ERROR(cublaslt_status(cublasLtCreate(&h), "cublaslt", "cublasLtCreate"));
    g_handle = h;
    g_workspaces = new std::map<cudaStream_t, void*>();
  }
  auto it = g_workspaces->find(stream);
  if (it == g_workspaces->end()) {
    void* ws = nullptr;
    DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&ws, kCublasLtWorkspaceBytes));
    it = g_workspaces->emplace(stream, ws).first;
  }
  return CublasLt{g_handle, it->second};
}

}  // namespace dsa::cuda
