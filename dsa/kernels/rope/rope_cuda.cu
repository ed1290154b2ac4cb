// RoPE application on the GPU (SPEC.md §8.3). The cos/sin tables are the host-built ones
// (rope_table_ref, uploaded); the device only reads them, never recomputes them.
//
// The rotation (rope_rotate.cuh) rounds each product and the sum as the CPU reference does, so the
// result is bit-identical to rope_ref (class T allows more; this costs nothing).
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/rope_rotate.cuh"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;

// One warp rotates the 64 rope values of one (token t, head h) row, lane i owning pair i:
// (x[2i], x[2i+1]) interleaved or (x[i], x[i+32]) non-interleaved, with cos/sin[pos[t], i].
// A position outside [0, T_rope) leaves the row untouched (the table is never read out of
// bounds); with an error word (checked mode) lane 0 of head 0 reports OutOfRange {t, pos}.
// Out of place (y != x): x is only read, the row goes to y at its own strides, and a token outside
// the table is copied unrotated.
__global__ void rope_kernel(const bf16* x, bf16* y, const int32_t* __restrict__ positions,
                            const float* __restrict__ cos_table,
                            const float* __restrict__ sin_table, int64_t rows, int32_t num_heads,
                            int64_t token_stride, int64_t head_stride, int64_t y_token_stride,
                            int64_t y_head_stride, int32_t num_positions, bool interleaved,
                            cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row / num_heads, h = row % num_heads;
  const int32_t pos = positions[t];
  const int32_t ia = rope_pair_first(interleaved, lane);
  const int32_t ib = rope_pair_second(interleaved, lane);
  const bf16* src = x + t * token_stride + h * head_stride;
  bf16* dst = y + t * y_token_stride + h * y_head_stride;
  const bf16 xa = src[ia], xb = src[ib];
  if (pos < 0 || pos >= num_positions) {
    if (h == 0 && lane == 0)
      cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                                static_cast<int32_t>(t), pos);
    if (y != x) dst[ia] = xa, dst[ib] = xb;  // out of place: copied unrotated
    return;
  }
  const float c = cos_table[int64_t{pos} * kRopePairs + lane];
  const float s = sin_table[int64_t{pos} * kRopePairs + lane];
  bf16 a = xa, b = xb;
  rope_rotate_pair(a, b, c, s);
  dst[ia] = a;
  dst[ib] = b;
}

}  // namespace

Status rope_cuda(const RopeParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  const int64_t rows = int64_t{p.num_tokens} * p.num_heads;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT32_MAX) return invalid_argument("rope: num_tokens * num_heads too large");
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * 32), size_t(0),
                        cuda::current_stream()},
      rope_kernel, p.x, p.y != nullptr ? p.y : p.x, p.positions, p.cos, p.sin, rows, p.num_heads,
      p.token_stride, p.head_stride, p.y != nullptr ? p.y_token_stride : p.token_stride,
      p.y != nullptr ? p.y_head_stride : p.head_stride, p.num_positions,
      p.style == RopeStyle::kInterleaved, err));
  return cuda::end_launch("rope", checked, "rope: positions[row] outside [0, num_positions)");
}

}  // namespace dsa::kernels
