// Tensor maps for the bulk tensor copy engine (TMA): the driver's cuTensorMapEncodeTiled, reached
// through the runtime's driver entry point so dsa links no libcuda. A map describes a strided
// array in device memory and the box one copy moves into shared memory; kernels take it by value
// as a __grid_constant__ parameter, so a captured CUDA graph keeps the map it was launched with.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::cuda {

// A byte tensor of `rank` (1..5) dimensions, innermost first: dims[i] elements, strides[i] bytes
// between consecutive indices of dimension i + 1 (multiples of 16), box[i] elements per copy
// (1..256, box[0] a multiple of 16 bytes; 128 at most with the 128-byte swizzle). Elements outside
// the tensor are zero-filled. InvalidArgument naming the field for a map the driver refuses.
struct ByteTensorMap {
  const void* base = nullptr;  // 16-byte aligned device address
  int rank = 2;
  std::array<uint64_t, 5> dims{};
  std::array<uint64_t, 4> strides{};  // bytes, for dimensions 1..rank-1
  std::array<uint32_t, 5> box{};
  bool swizzle_128b = true;  // the layout wgmma reads K-major operands in
};

// Writes the map to *out (a 64-byte aligned type: returned through a pointer, not a StatusOr).
Status encode_tensor_map(const ByteTensorMap& m, CUtensorMap* out);

// The K-major byte operand wgmma reads (e4m3 weights or quantised tokens): [rows][cols] bytes,
// one box = [box_rows][128 B] in the 128-byte swizzle; rows past the end are zero-filled.
Status byte_rows_map(const void* base, int32_t rows, int32_t cols, int box_rows, CUtensorMap* out);

}  // namespace dsa::cuda
