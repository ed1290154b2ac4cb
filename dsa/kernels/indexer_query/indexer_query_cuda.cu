// The indexer's query side on the GPU (SPEC.md §8.5 steps 1, 3-5) in one launch where the unfused
// forward had four (copy_rows_2d, rope, hadamard, indexer_q_quant).
//
// One warp per (token, head), lane l holding values 4l..4l+3 of the head in registers from the
// load to the codes: the rotation of rope_kernel (rope_rotate.cuh), the butterflies of
// hadamard_kernel (hadamard_warp.cuh) and the quantisation of indexer_q_quant_kernel
// (indexer_q_quant_warp.cuh), each result rounded to bf16 where the unfused ops store bf16. Every
// step is the same device code on the same inputs as the separate kernels, so the result is
// bit-identical to rope_cuda + hadamard_cuda + indexer_q_quant_cuda on the copied heads.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/grid_stride.h"
#include "dsa/kernels/common/hadamard_warp.cuh"
#include "dsa/kernels/common/indexer_q_quant_warp.cuh"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/common/rope_rotate.cuh"
#include "dsa/kernels/indexer_query/indexer_query.h"

namespace dsa::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
static_assert(kIndexHeadDim == 4 * 32, "one warp, four values a lane, per head");
static_assert(kRopePairs == 32, "the rope dims are the head's first 64 values");

// RoPE of the head's first 64 values (lanes 0..15) with the table rows c, s of its position;
// lanes 16..31 (values 64..127) keep theirs. Every lane of the warp calls (the shuffle).
//  - Interleaved: pairs (2i, 2i+1); lane l < 16 holds pairs 2l and 2l+1 whole.
//  - Non-interleaved: pairs (i, i + 32); lane l < 8 holds the first members of pairs 4l..4l+3,
//    lane l + 8 their second members. The two lanes swap values (xor 8) and both rotate the same
//    pair from the same inputs, each keeping the member it owns: rope_kernel's one rotation.
__device__ __forceinline__ void rope_lane(bf16 (&v)[4], int lane, const float* __restrict__ c,
                                          const float* __restrict__ s, bool interleaved) {
  if (interleaved) {
    if (lane < 16) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = 2 * lane + k;
        rope_rotate_pair(v[2 * k], v[2 * k + 1], c[i], s[i]);
      }
    }
    return;
  }
  bf16 other[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    other[k].bits = static_cast<uint16_t>(__shfl_xor_sync(0xFFFFFFFFu, uint32_t{v[k].bits}, 8));
  if (lane < 16) {
    const bool first = lane < 8;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = 4 * (lane & 7) + k;
      bf16 a = first ? v[k] : other[k];
      bf16 b = first ? other[k] : v[k];
      rope_rotate_pair(a, b, c[i], s[i]);
      v[k] = first ? a : b;
    }
  }
}

// Warp r of the grid (striding by the grid's warps) computes (token t, head h) = (r / H, r % H).
// `vec_q`: q's rows are 8-byte aligned (each lane loads its 4 values at once); `vec_q8`: q8 is
// 4-byte aligned (each lane stores its 4 codes at once). A position outside [0, T_rope) leaves
// the head unrotated (the table is never read out of bounds); with an error word (checked mode)
// lane 0 of head 0 reports OutOfRange {t, pos}, as rope_kernel does.
__global__ void indexer_query_kernel(IndexerQueryParams p, bool interleaved, bool vec_q,
                                     bool vec_q8, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t rows = int64_t{p.num_tokens} * p.num_heads;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  const int lane = threadIdx.x % 32;
  // r is warp-uniform, so whole warps run each iteration (the shuffles below need all 32 lanes).
  for (int64_t r = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32; r < rows; r += warps) {
    const int32_t t = static_cast<int32_t>(r) / p.num_heads;  // r < rows <= INT32_MAX (validate)
    const int32_t h = static_cast<int32_t>(r) - t * p.num_heads;
    const bf16* src = p.q + t * p.q_token_stride + int64_t{h} * kIndexHeadDim + 4 * lane;
    bf16 v[4];
    if (vec_q) {
      *reinterpret_cast<uint2*>(v) = *reinterpret_cast<const uint2*>(src);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = src[k];
    }

    const int32_t pos = p.positions[t];
    if (pos < 0 || pos >= p.num_positions) {
      if (h == 0 && lane == 0)
        cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp, t, pos);
    } else {
      const int64_t row = int64_t{pos} * kRopePairs;
      rope_lane(v, lane, p.cos + row, p.sin + row, interleaved);
    }

    float x[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = bf16_to_float(v[k]);
    hadamard128_warp(x, lane);
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = round_to_bf16(x[k]);  // hadamard's bf16 output

    uint8_t codes[4];
    const int32_t e = indexer_q_quant_warp(x, codes);
    uint8_t* dst = p.q8 + r * kIndexHeadDim + 4 * lane;
    if (vec_q8) {
      *reinterpret_cast<uint32_t*>(dst) = uint32_t{codes[0]} | uint32_t{codes[1]} << 8 |
                                          uint32_t{codes[2]} << 16 | uint32_t{codes[3]} << 24;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) dst[k] = codes[k];
    }
    if (lane == 0) p.w[r] = indexer_q_fold_weight(p.w[r], p.fold, e);
  }
}

}  // namespace

Status indexer_query_cuda(const IndexerQueryParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  const int64_t rows = int64_t{p.num_tokens} * p.num_heads;  // <= INT32_MAX (validate)
  // Head offsets are 256-byte multiples: the rows are 8-byte aligned when q and the token stride
  // (4 bf16 = 8 bytes) are.
  const bool vec_q = cuda::is_aligned(p.q, 8) && p.q_token_stride % 4 == 0;
  const bool vec_q8 = cuda::is_aligned(p.q8, 4);
  const unsigned grid = grid_stride_blocks(rows, kWarpsPerBlock);  // a warp per (token, head)
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(grid), dim3(kWarpsPerBlock * 32), size_t(0), cuda::current_stream()},
      indexer_query_kernel, p, p.style == RopeStyle::kInterleaved, vec_q, vec_q8, err));
  return cuda::end_launch("indexer_query", checked,
                          "indexer_query: positions[token] outside [0, num_positions)");
}

}  // namespace dsa::kernels
