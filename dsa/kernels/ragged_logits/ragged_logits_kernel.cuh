// Ragged MQA logits kernel (SPEC.md §3d).
//
// One block = R = 256 / H_i consecutive query rows t0 .. t0 + R - 1 (4 rows at H_i = 64; EXTEND
// rows of one request share ks, so their key ranges overlap almost entirely). The block copies its
// q rows ([R H_i, 128] e4m3) and weights into shared memory once, then streams 256-key tiles of
// the gathered buffer over [min ks, max ke) of its rows through kStages cp.async stages, skipping
// tiles no row needs, and computes each tile on the tensor cores with the same warp tile as the
// paged kernel ([R H_i, 128] q x [128, 256] keys, fp8 MMA, relu, w, head sum, kscale). Row t's
// column j = c - ks[t] is written for ks[t] <= c < ke[t] only (compressed layout).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/common/mqa_logits_mma.cuh"

namespace dsa::kernels::ragged_logits_detail {

using namespace mqa_mma;  // NOLINT: the kernel's building blocks

inline constexpr int kStages = 2;
inline constexpr int kMaxRows = kMaxQRows / 16;  // R at H_i = 16
inline constexpr int kStageBytes = kKeyBytes + kScaleBytes;
inline constexpr int kQOffset = kStages * kStageBytes;
inline constexpr int kWOffset = kQOffset + kQBytes;
inline constexpr int kSmemBytes = kWOffset + kWBytes;  // 101,376: two blocks per SM

struct Args {
  const uint8_t* q;     // [T, H, 128] e4m3
  const float* w;       // [T, H]
  const uint8_t* k8;    // [S, 128] e4m3
  const float* kscale;  // [S]
  const int32_t* ks;    // [T]
  const int32_t* ke;    // [T]
  float* logits;        // [T, ld]
  cuda::DeviceErrorWord* err;
  int64_t ld;
  int32_t T, S, heads, rows_per_block;
  int32_t checked;
};

__device__ __forceinline__ void report(const Args& a, int32_t row, int32_t value) {
  cuda::report_device_error(a.err, StatusCode::kOutOfRange, cuda::OpId::kRaggedLogits, row, value);
}

__global__ void __launch_bounds__(kThreads, 2)
    ragged_logits_kernel(const __grid_constant__ Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int32_t row_ks[kMaxRows], row_ke[kMaxRows];
  const int64_t t0 = int64_t{blockIdx.x} * a.rows_per_block;
  const int rows = int(min(int64_t{a.rows_per_block}, a.T - t0));

  // Row ranges: checked rules reported, then clamped as in unchecked mode (never dereferenced).
  if (threadIdx.x < rows) {
    const int64_t t = t0 + threadIdx.x;
    int32_t ks = a.ks[t], ke = a.ke[t];
    if (a.checked) {
      if (ks < 0 || ks > a.S) {
        report(a, int32_t(t), ks);
      } else if (ke < ks || ke > a.S) {
        report(a, int32_t(t), ke);
      } else if (int64_t{ke} - ks > a.ld) {
        report(a, int32_t(t), ke - ks);
      }
    }
    ks = ks < 0 ? 0 : (ks > a.S ? a.S : ks);
    const int64_t hi = min(int64_t{a.S}, int64_t{ks} + a.ld);
    ke = int32_t(ke < ks ? ks : (ke > hi ? hi : ke));
    row_ks[threadIdx.x] = ks;
    row_ke[threadIdx.x] = ke;
  }
  load_q_async(smem + kQOffset, reinterpret_cast<float*>(smem + kWOffset),
               a.q + t0 * a.heads * kDim, a.w + t0 * a.heads, rows * a.heads);
  cp_async_commit();
  __syncthreads();

  int32_t lo = a.S, hi = 0;
  for (int j = 0; j < rows; ++j) {
    if (row_ks[j] < row_ke[j]) lo = min(lo, row_ks[j]), hi = max(hi, row_ke[j]);
  }
  auto tile_needed = [&](int32_t c0) {
    for (int j = 0; j < rows; ++j) {
      if (row_ks[j] < row_ke[j] && row_ks[j] < c0 + kTileTokens && row_ke[j] > c0) return true;
    }
    return false;
  };

  int32_t pending[kStages] = {};
  int num_pending = 0, produced = 0;
  auto consume_oldest = [&](bool drain) {
    if (drain) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<kStages - 1>();
    }
    __syncthreads();
    const int32_t c0 = pending[0];
    const int stage = (produced - num_pending) % kStages;
    uint8_t* st = smem + stage * kStageBytes;
    if (c0 + (threadIdx.x >> 5) * 32 < hi) {
      warp_tile_logits(st, reinterpret_cast<const float*>(st + kKeyBytes), smem + kQOffset,
                       reinterpret_cast<const float*>(smem + kWOffset), rows, a.heads,
                       [&](int j, int token, float v0, float v1) {
                         const int32_t c = c0 + token, ks = row_ks[j], ke = row_ke[j];
                         float* out = a.logits + (t0 + j) * a.ld;
                         if (c >= ks && c < ke) out[c - ks] = v0;
                         if (c + 1 >= ks && c + 1 < ke) out[c + 1 - ks] = v1;
                       });
    }
    __syncthreads();  // the stage is free for the next copy
#pragma unroll
    for (int s = 0; s + 1 < kStages; ++s) pending[s] = pending[s + 1];
    --num_pending;
  };

  for (int32_t c0 = lo; c0 < hi; c0 += kTileTokens) {
    if (!tile_needed(c0)) continue;
    uint8_t* st = smem + (produced % kStages) * kStageBytes;
    const uint32_t keys = smem_addr(st), scales = smem_addr(st + kKeyBytes);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int x = threadIdx.x + kThreads * i, o = x >> 3, ch = x & 7;
      const bool valid = c0 + o < hi;
      cp_async16(keys + swizzled(o, ch), valid ? a.k8 + (int64_t{c0} + o) * kDim + ch * 16 : a.k8,
                 valid);
    }
    const bool valid = c0 + int(threadIdx.x) < hi;
    cp_async4(scales + threadIdx.x * 4, valid ? a.kscale + c0 + threadIdx.x : a.kscale, valid);
    cp_async_commit();
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s == num_pending) pending[s] = c0;
    }
    ++num_pending;
    ++produced;
    if (num_pending == kStages) consume_oldest(false);
  }
  while (num_pending > 0) consume_oldest(true);
  cp_async_wait<0>();  // the q copy of a block whose rows are all empty
}

}  // namespace dsa::kernels::ragged_logits_detail
