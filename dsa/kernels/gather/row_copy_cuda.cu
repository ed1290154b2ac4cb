// Row copy on the GPU (SPEC.md §8.6): one block per listed row, a plain byte copy.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/gather/row_copy.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;

// One block per listed row i; threads copy 16-byte words when every address allows it, else bytes.
__global__ void row_copy_kernel(RowCopyParams p, bool vec) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t i = blockIdx.x;
  const int32_t r = p.index[i];
  const bool skip = r < 0 || r >= p.index_bound;
  if (skip && !p.zero_skipped) return;
  const bool gather = p.mode == RowCopyMode::kGather;
  const int64_t s = gather ? r : i, d = gather ? i : r;
  // A skipped row with zero_skipped (a gather: d = i) is written from no source, as zeros.
  const char* src = skip ? nullptr : static_cast<const char*>(p.src) + s * p.src_stride;
  char* dst = static_cast<char*>(p.dst) + d * p.dst_stride;
  if (vec) {
    const uint4* sv = reinterpret_cast<const uint4*>(src);
    uint4* dv = reinterpret_cast<uint4*>(dst);
    for (int64_t w = threadIdx.x; w < p.row_bytes / 16; w += blockDim.x)
      dv[w] = skip ? make_uint4(0u, 0u, 0u, 0u) : sv[w];
    return;
  }
  for (int64_t b = threadIdx.x; b < p.row_bytes; b += blockDim.x) dst[b] = skip ? char(0) : src[b];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

Status row_copy_cuda(const RowCopyParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_rows == 0 || p.row_bytes == 0) return ok_status();
  const bool vec = p.row_bytes % 16 == 0 && p.src_stride % 16 == 0 && p.dst_stride % 16 == 0 &&
                   aligned16(p.src) && aligned16(p.dst);
  const int threads = static_cast<int>(
      std::clamp<int64_t>(((vec ? p.row_bytes / 16 : p.row_bytes) + 31) / 32 * 32, 32, kThreads));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(p.num_rows)), dim3(threads),
                                     size_t(0), cuda::current_stream()},
                   row_copy_kernel, p, vec));
  return cuda::launch_error("row_copy");
}

}  // namespace dsa::kernels
