// FP8 block-scaled linear for few tokens (SPEC.md §8.8) on Hopper's fp8 tensor cores: the decode
// shape, where the weight stream is everything and the tokens are few.
//
// The MMA is "swapped": the weight tile is wgmma's A (M = 64 output rows, K-major as the
// checkpoint stores it) and the quantised tokens are B (N = the launch's rows rounded up to 8, 16,
// 32 or 64), so a single token still fills the tensor core's M side. One CTA owns 64 output rows
// and a range of 128-wide K blocks (split-K, so a 576-row projection still spreads over every
// SM); per K block a producer warp streams the weight tile [64][128 B] and the token tile
// [N][128 B] by the bulk tensor copy engine (128-byte swizzle) into a ring of stages completing
// on mbarriers, and the consumer warpgroup runs four wgmma m64nNk32 e4m3 steps into fresh
// accumulators, then promotes them to its fp32 sums scaled by sw[block] * sx[token][block] — the
// per-block promotion §8.8 requires. Two accumulator sets alternate, so one block's MMA runs
// while the previous block is promoted, and each block's scales are loaded before its MMA is
// awaited (a serial wait-load-promote per block ran at 20-60% of the bandwidth). With several
// splits each CTA writes its partial sums to scratch; the last CTA of a row tile to finish (an
// atomic ticket) adds the partials in split order, so the result does not depend on which CTA
// finishes last, and resets the ticket for the next launch (or graph replay).
//
// The fused form (kFused) takes the tokens in bf16 and quantises them itself: the consumers write
// the CTA's K blocks of every token, already in the swizzled layout, into a token area beside the
// weight ring, so a call is one kernel instead of the quantiser and the GEMM (a graph node fewer
// per linear at decode). It is taken only where the area fits beside the full ring without
// costing residency (kFusedMaxBlocks): measured on the H100, a ring cut to 3 stages to make room
// for o_proj's 26 blocks cost more than the quantiser it saved (bench/RESULTS.md 2026-12-05).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/wgmma_e4m3_ops.cuh"
#include "dsa/kernels/linear/linear_fp8_cuda.h"
#include "dsa/kernels/linear/token_quant.cuh"

namespace dsa::kernels::linear_fp8 {

using namespace hopper;  // NOLINT: the kernel's building blocks

inline constexpr int kTileRows = 64;  // output rows per CTA: wgmma's M
inline constexpr int kBlock = 128;    // K per stage: one scale block, one 128-byte swizzle row
inline constexpr int kConsumerThreads = 128;
inline constexpr int kThreads = kConsumerThreads + 32;  // the consumer warpgroup + a producer warp
inline constexpr int kStages = 6;
inline constexpr int kWeightTileBytes = kTileRows * kBlock;  // 8192

template <int N>
inline constexpr int kStageBytes = kWeightTileBytes + N* kBlock;  // a multiple of 1024
template <int N>
inline constexpr int kSmemBytes = kStages* kStageBytes<N> + 1024;  // + the base alignment

// The fused form's shared memory: the weight ring (kStages x 8 KiB, as the two-kernel form),
// then the token area ([blocks][N][128 B], the CTA's K blocks of every token), then their scales
// ([blocks][N] floats). A CTA may take the larger of the two-kernel form's kSmemBytes<N> and a
// quarter of the SM (four CTAs resident, as the decode shapes run), which bounds the K blocks of
// one split (6 at N = 8, 5 at N = 16 and 32).
inline constexpr int kFusedRingBytes = kStages * kWeightTileBytes;
template <int N>
inline constexpr int kFusedSmemBudget = kSmemBytes<N> > 57344 ? kSmemBytes<N> : 57344;
template <int N>
inline constexpr int kFusedMaxBlocks = (kFusedSmemBudget<N> - 1024 - kFusedRingBytes) /
                                       (N * (kBlock + static_cast<int>(sizeof(float))));
static_assert(kFusedMaxBlocks<8> == 6 && kFusedMaxBlocks<16> == 5 && kFusedMaxBlocks<32> == 5,
              "the limits docs/architecture.md and the tests name");
template <int N>
constexpr size_t fused_smem_bytes(int kb_per_split) {
  return 1024 + size_t{kFusedRingBytes} + size_t(kb_per_split) * N * (kBlock + sizeof(float));
}

// Consumer-warpgroup barrier (the producer warp has left by then).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
}

// Thread `lane` of warp `warp` holds, for each 8-column group c, D[r][t], D[r][t + 1],
// D[r + 8][t], D[r + 8][t + 1] with r = 16 warp + lane / 4 and t = 8 c + 2 (lane % 4).
template <int N>
__device__ __forceinline__ void store_rows(const SmallArgs& a, int tile, const float (&v)[N / 2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = tile * kTileRows + 16 * warp + lane / 4;
#pragma unroll
  for (int c = 0; c < N / 8; ++c) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = r + (e >= 2 ? 8 : 0), t = 8 * c + 2 * (lane % 4) + (e & 1);
      if (row >= a.out || t >= a.rows) continue;
      const int64_t at = int64_t{t} * a.out + row;
      if (a.y != nullptr) {
        a.y[at] = float_to_bf16(v[4 * c + e]);
      } else {
        a.y_f32[at] = v[4 * c + e];
      }
    }
  }
}

// The fused form's tokens: the consumers quantise K blocks [kb0, kb0 + blocks) of every token
// into `area` in the layout the copy engine's 128-byte swizzle writes (16-byte chunk j of token
// row t at chunk j ^ (t % 8); the area is 1024-byte aligned and each block's tile N x 128 bytes),
// with their scales in `scales[i * N + t]`. Columns past a.in get zero codes (the weights' copy
// zero-fills past `in`, and a garbage byte could be a NaN code); the padding rows a.rows..N-1 are
// zeroed with scale 0. Half a warp per (block, token) of the real tokens only, four items' loads
// in flight per half warp (a decode token's blocks in one round).
template <int N>
__device__ __forceinline__ void quantize_tokens_into(const SmallArgs& a, int kb0, int blocks,
                                                     uint8_t* area, float* scales) {
  const int tid = static_cast<int>(threadIdx.x), half = tid / 16, l = tid % 16;
  const int rows = a.rows, items = blocks * rows;  // item = i * rows + t
  constexpr int kUnroll = 4, kHalves = kConsumerThreads / 16;
  for (int base = 0; base < items; base += kHalves * kUnroll) {  // the same trips in every warp
    uint4 raw[kUnroll];
    bool has[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int item = base + kHalves * u + half, t = item % rows;
      const int col = (kb0 + item / rows) * kBlock + 8 * l;
      has[u] = item < items && col < a.in;  // in % 16 == 0: all 8 values in range
      raw[u] = has[u] ? *reinterpret_cast<const uint4*>(a.x + int64_t{t} * a.in + col)
                      : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int item = base + kHalves * u + half, i = item / rows, t = item % rows;
      const Quant8 q = quantize_half_warp8(raw[u], has[u]);
      if (item >= items) continue;
      uint8_t* row = area + (i * N + t) * kBlock;
      *reinterpret_cast<uint2*>(row + (((l >> 1) ^ (t & 7)) << 4) + (l & 1) * 8) = q.codes;
      if (l == 0) scales[i * N + t] = q.scale;
    }
  }
  // Padding rows: 16-byte zeros over rows..N-1 of every block (the swizzle only permutes chunks
  // within a row, so whole rows are zeroed in any order).
  const int pad_chunks = (N - rows) * (kBlock / 16);
  for (int c = tid; c < blocks * pad_chunks; c += kConsumerThreads) {
    const int i = c / pad_chunks, r = c % pad_chunks;
    *reinterpret_cast<uint4*>(area + (i * N + rows) * kBlock + 16 * r) = make_uint4(0, 0, 0, 0);
  }
  for (int c = tid; c < blocks * (N - rows); c += kConsumerThreads) {
    scales[(c / (N - rows)) * N + rows + c % (N - rows)] = 0.f;
  }
}

template <int N, bool kFused>
__global__ void __launch_bounds__(kThreads)
    linear_fp8_small_kernel(const __grid_constant__ CUtensorMap weights,
                            const __grid_constant__ CUtensorMap tokens, SmallArgs a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  constexpr int kStage = kFused ? kWeightTileBytes : kStageBytes<N>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ int last_split;
  const int tid = threadIdx.x;
  const int tile = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.y);
  const int kb0 = split * a.kb_per_split;
  const int blocks = min(a.nkb, kb0 + a.kb_per_split) - kb0;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerThreads);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (tid >= kConsumerThreads) {  // the producer warp: one lane issues every copy
    if (tid == kConsumerThreads) {
      prefetch_tensor_map(&weights);
      if constexpr (!kFused) prefetch_tensor_map(&tokens);
      for (int i = 0; i < blocks; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(&empty[s], ((i / kStages) - 1) & 1);
        uint8_t* stage = smem + s * kStage;
        mbar_arrive_expect_tx(&full[s], kStage);
        const int k = (kb0 + i) * kBlock;
        tma_load_2d(stage, &weights, &full[s], k, tile * kTileRows);
        if constexpr (!kFused) tma_load_2d(stage + kWeightTileBytes, &tokens, &full[s], k, 0);
      }
    }
    return;
  }
  uint8_t* const token_area = smem + kFusedRingBytes;  // the fused form's
  float* const token_scales = reinterpret_cast<float*>(token_area + blocks * N * kBlock);
  if constexpr (kFused) {
    quantize_tokens_into<N>(a, kb0, blocks, token_area, token_scales);
    fence_proxy_async_smem();  // the codes are read by wgmma, through the async proxy
    consumers_sync();
  }

  const int lane = tid % 32;
  const int weight_block_row = tile * kTileRows / kBlock;
  // Block i's scales for this thread's columns: sw * sx[t] for t = 8 c + 2 (lane % 4) + {0, 1}.
  // Loaded before the block's MMA is awaited, so their latency hides behind it.
  const auto load_scales = [&](int i, float(&sc)[N / 4]) {
    const int kb = kb0 + i;
    const float sw = a.sw[int64_t{weight_block_row} * a.nkb + kb];
    const float* sxk = kFused ? token_scales + i * N : a.sx + int64_t{kb} * a.sx_ld;
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      const int t = 8 * c + 2 * (lane % 4);
      sc[2 * c] = t < a.rows ? sxk[t] * sw : 0.f;  // exact: sx is a power of two
      sc[2 * c + 1] = t + 1 < a.rows ? sxk[t + 1] * sw : 0.f;
    }
  };
  // Waits for block i's stage and issues its four k-steps into d (one commit group).
  const auto issue = [&](int i, float(&d)[N / 2]) {
    const int s = i % kStages;
    mbar_wait(&full[s], (i / kStages) & 1);
    const uint32_t wa = smem_u32(smem + s * kStage);
    const uint32_t xa = kFused ? smem_u32(token_area + i * N * kBlock) : wa + kWeightTileBytes;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kBlock / 32; ++k) {
      wgmma::wgmma_m64k32_e4m3<N>(d, kmajor_sw128_desc(wa + 32 * k), kmajor_sw128_desc(xa + 32 * k),
                                  k > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  float acc[N / 2] = {};
  // Block i's MMA completed into d: release its stage, add d * scales to the sums.
  const auto promote = [&](int i, float(&d)[N / 2], const float(&sc)[N / 4]) {
    fence_registers(d);
    mbar_arrive(&empty[i % kStages]);  // this thread's reads of the stage are done
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      acc[4 * c + 0] = fmaf(d[4 * c + 0], sc[2 * c], acc[4 * c + 0]);
      acc[4 * c + 1] = fmaf(d[4 * c + 1], sc[2 * c + 1], acc[4 * c + 1]);
      acc[4 * c + 2] = fmaf(d[4 * c + 2], sc[2 * c], acc[4 * c + 2]);
      acc[4 * c + 3] = fmaf(d[4 * c + 3], sc[2 * c + 1], acc[4 * c + 3]);
    }
  };
  // Two accumulator sets: block i + 1's MMA runs while block i is promoted.
  float d0[N / 2], d1[N / 2], sc0[N / 4], sc1[N / 4];
  if (blocks > 0) {
    load_scales(0, sc0);
    issue(0, d0);
  }
  for (int i = 0; i < blocks; i += 2) {  // block i is in flight in d0
    if (i + 1 < blocks) {
      load_scales(i + 1, sc1);
      issue(i + 1, d1);
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    promote(i, d0, sc0);
    if (i + 1 >= blocks) break;
    if (i + 2 < blocks) {
      load_scales(i + 2, sc0);
      issue(i + 2, d0);
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    promote(i + 1, d1, sc1);
  }
  if (a.splits == 1) {
    store_rows<N>(a, tile, acc);
    return;
  }

  // Split-K: publish this split's sums; the last split of the tile adds them all in split order.
  const int64_t tiles = gridDim.x;
  float4* mine = reinterpret_cast<float4*>(
      a.partial + ((int64_t{split} * tiles + tile) * kConsumerThreads + tid) * (N / 2));
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    mine[j] = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
  }
  __threadfence();
  consumers_sync();
  if (tid == 0) {
    const uint32_t before = atomicAdd(&a.tickets[tile], 1u);
    last_split = before == static_cast<uint32_t>(a.splits - 1);
    if (last_split) a.tickets[tile] = 0;  // every split has taken its ticket: ready for the next
  }
  consumers_sync();
  if (!last_split) return;
  __threadfence();
  float sum[N / 2] = {};
#pragma unroll 8  // the loads of eight splits in flight; the adds stay in split order
  for (int s = 0; s < a.splits; ++s) {
    const float4* part = reinterpret_cast<const float4*>(
        a.partial + ((int64_t{s} * tiles + tile) * kConsumerThreads + tid) * (N / 2));
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const float4 v = __ldcg(part + j);  // L2: other CTAs wrote it
      sum[4 * j] += v.x;
      sum[4 * j + 1] += v.y;
      sum[4 * j + 2] += v.z;
      sum[4 * j + 3] += v.w;
    }
  }
  store_rows<N>(a, tile, sum);
}

}  // namespace dsa::kernels::linear_fp8
