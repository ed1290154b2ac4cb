// What the sparse MLA kernels share (SPEC.md §3f, §3g): the tile geometry, the kernel arguments,
// and the split-KV combine kernel. The attention kernel itself is sparse_mla_wgmma.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels::sparse_mla_cuda {

inline constexpr int kHeadsPerCta = 64;
inline constexpr int kTileKeys = 64;
inline constexpr int kQkChunks = kQkDim / 8;  // 72 16-byte chunks per bf16 row

inline constexpr float kLn2 = 0.693147180559945309f;

struct MlaKernelArgs {
  const bf16* q;            // [R, H, 576]
  const uint8_t* kv;        // key rows: bf16 [*, 576] or FP8-656 [*, 656 B]
  const int32_t* indices;   // [R, K]
  const int32_t* topk_len;  // [R] or nullptr
  int32_t rows, heads, topk;
  int32_t lo, hi;    // valid key indices are [lo, hi)
  float scale_log2;  // sm_scale * log2(e)
  bf16* out;         // [R, H, 512]
  float* lse;        // [R, H]
  float* max_logit;  // [R, H] or nullptr
  int32_t num_splits;
  float* part_o;               // [S, R * H, 512] (split only)
  float* part_ml;              // [S, R * H, 2]: m (log2 domain), l
  cuda::DeviceErrorWord* err;  // checked mode only, else nullptr
};

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // RNE, lo in the low half
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------------------------------------
// Split combine. grid = R * H, block = 128: one (row, head), 4 value dims per thread, splits
// merged in order 0..S-1 (deterministic).
// ---------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(128) sparse_mla_combine_kernel(const MlaKernelArgs a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t rh = blockIdx.x;
  const int64_t rh_total = int64_t{a.rows} * a.heads;
  const int d = threadIdx.x * 4;
  float mx = -INFINITY;
  bool empty = true;  // every split's l = 0 exactly (a NaN key's l is NaN: not empty, stays NaN)
  for (int s = 0; s < a.num_splits; ++s) {
    mx = fmaxf(mx, a.part_ml[(s * rh_total + rh) * 2]);
    empty = empty && a.part_ml[(s * rh_total + rh) * 2 + 1] == 0.f;
  }
  bf16* out = a.out + rh * kVDim + d;
  if (empty) {  // empty attended set
    *reinterpret_cast<uint2*>(out) = make_uint2(0u, 0u);
    if (threadIdx.x == 0) {
      a.lse[rh] = INFINITY;
      if (a.max_logit != nullptr) a.max_logit[rh] = -INFINITY;
    }
    return;
  }
  float sum = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < a.num_splits; ++s) {
    const int64_t slot = s * rh_total + rh;
    const float w = exp2f(a.part_ml[slot * 2] - mx);  // 0 for an empty split (m = -inf)
    sum += a.part_ml[slot * 2 + 1] * w;
    const float4 v = *reinterpret_cast<const float4*>(a.part_o + slot * kVDim + d);
    acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
  }
  const float inv = 1.f / sum;
  *reinterpret_cast<uint2*>(out) =
      make_uint2(pack_bf16x2(acc.x * inv, acc.y * inv), pack_bf16x2(acc.z * inv, acc.w * inv));
  if (threadIdx.x == 0) {
    a.lse[rh] = mx * kLn2 + logf(sum);
    if (a.max_logit != nullptr) a.max_logit[rh] = mx * kLn2;
  }
}

}  // namespace dsa::kernels::sparse_mla_cuda
