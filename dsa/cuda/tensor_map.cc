#include "dsa/cuda/tensor_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <string>

#include "dsa/cuda/cuda_check.h"

namespace dsa::cuda {

namespace {

// The driver function, looked up once per process.
StatusOr<PFN_cuTensorMapEncodeTiled_v12000> encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaError_t err = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &found);
    if (e == cudaSuccess && found == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return e;
  }();
  DSA_CUDA_RETURN_IF_ERROR(err);
  if (fn == nullptr) {
    return Status(StatusCode::kUnimplemented,
                  "cuTensorMapEncodeTiled is not available from this driver (needs CUDA 12+)");
  }
  return fn;
}

Status invalid(const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "encode_tensor_map: " + what);
}

}  // namespace

Status encode_tensor_map(const ByteTensorMap& m, CUtensorMap* out) {
  if (m.rank < 1 || m.rank > 5) return invalid("rank = " + std::to_string(m.rank) + ", want 1..5");
  if (m.base == nullptr || reinterpret_cast<uintptr_t>(m.base) % 16 != 0) {
    return invalid("base must be a 16-byte aligned device address");
  }
  for (int i = 0; i < m.rank; ++i) {
    if (m.dims[i] == 0) return invalid("dims[" + std::to_string(i) + "] = 0");
    if (m.box[i] == 0 || m.box[i] > 256) {
      return invalid("box[" + std::to_string(i) + "] = " + std::to_string(m.box[i]) +
                     ", want 1..256");
    }
    if (i + 1 < m.rank && m.strides[i] % 16 != 0) {
      return invalid("strides[" + std::to_string(i) + "] = " + std::to_string(m.strides[i]) +
                     ", want a multiple of 16");
    }
  }
  if (m.box[0] % 16 != 0 || (m.swizzle_128b && m.box[0] > 128)) {
    return invalid("box[0] = " + std::to_string(m.box[0]) + " bytes, want a multiple of 16" +
                   (m.swizzle_128b ? " and at most 128 with the 128-byte swizzle" : ""));
  }
  DSA_ASSIGN_OR_RETURN(PFN_cuTensorMapEncodeTiled_v12000 fn, encode_fn());
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elem_strides[5];
  for (int i = 0; i < m.rank; ++i) {
    dims[i] = m.dims[i];
    box[i] = m.box[i];
    elem_strides[i] = 1;
    if (i + 1 < m.rank) strides[i] = m.strides[i];
  }
  const CUresult r =
      fn(out, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<cuuint32_t>(m.rank),
         const_cast<void*>(m.base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
         m.swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return invalid("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)));
  }
  return ok_status();
}

Status byte_rows_map(const void* base, int32_t rows, int32_t cols, int box_rows, CUtensorMap* out) {
  ByteTensorMap m;
  m.base = base;
  m.rank = 2;
  m.dims = {uint64_t(cols), uint64_t(rows)};
  m.strides = {uint64_t(cols)};
  m.box = {128u, uint32_t(box_rows)};
  return encode_tensor_map(m, out);
}

}  // namespace dsa::cuda
