// The compute half of the MQA logits kernels on Hopper's fp8 tensor cores (SPEC.md §3b, §3d),
// shared by the paged and the ragged kernel: one consumer warpgroup scores a split of up to four
// 64-token key tiles (in shared memory, 128-byte swizzle) against the q columns of its CTA
// (N = (query row, head) pairs, also in shared memory) with wgmma m64nNk32 e4m3 -> f32, then runs
// the relu · weight · head-sum epilogue in registers and stores each row's scores inside that
// row's column window. The kernels differ only in where keys come from and which columns a row
// owns, so both build a ChunkRows and call split_chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/wgmma_e4m3_ops.cuh"

namespace dsa::kernels::mqa_wgmma {

using namespace hopper;  // NOLINT: the tile's building blocks

inline constexpr int kDim = 128;                      // D_i: one swizzle row
inline constexpr int kTokens = 64;                    // one key tile = one wgmma M tile
inline constexpr int kSplitPages = 4;                 // key tiles per split
inline constexpr int kKeyTileBytes = kTokens * kDim;  // 8192
inline constexpr int kConsumerThreads = 128;          // one warpgroup

// The head sum on the tensor cores. The wgmma accumulator of a page (64 tokens x NC columns) is,
// warp by warp, already the A operand layout of mma.sync m16n8k16 (16 tokens x 16 columns per
// k-step), so relu(S) is packed to bf16 in registers (one cvt.relu per two scores) and multiplied
// by a B of the head weights, B[k][j] = w[k] when column k belongs to row j of the chunk, else 0:
// D[token][j] = sum_h w[j, h] relu(S[token, j, h]) for the chunk's NC / H <= 8 rows.
// Precision (§3b, 2^-8 M): relu(S) rounded to bf16 is off by <= 2^-9 of each term; w is split
// into bf16 hi + lo parts (two MMAs), off by ~2^-17; products and sums are fp32. So the head sum
// is within ~2^-9 M of exact, leaving half the bound to the fp8 MMA's own accumulation.
__device__ __forceinline__ uint32_t bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ uint32_t relu_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float bf16_value(float x) {  // x rounded to bf16, as fp32
  return __uint_as_float(bf16x2(x, 0.f) << 16);
}
// D[16 x 8] += A[16 x 16] B[16 x 8], bf16 inputs, fp32 accumulate (sm_80+ PTX).
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// This thread's B fragments of a chunk of NC q columns (lane g, t: column pairs 2t, 2t + 1 and
// 2t + 8, 2t + 9 of each 16-column k-step, output row j = g), hi and lo parts.
template <int H, int NC>
struct ChunkWeights {
  uint32_t hi[NC / 16][2], lo[NC / 16][2];
  __device__ __forceinline__ void load(const float* w) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int s = 0; s < NC / 16; ++s) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v[2], h[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 16 * s + 8 * half + 2 * t + e;
          v[e] = col / H == g ? w[col] : 0.f;
          h[e] = bf16_value(v[e]);
        }
        hi[s][half] = bf16x2(h[0], h[1]);
        lo[s][half] = bf16x2(v[0] - h[0], v[1] - h[1]);
      }
    }
  }
};

// The rows of a chunk this thread stores (lane t: chunk rows 2t and 2t + 1), resolved by the
// kernel once per split chunk. Key s of the split is stored at ptr[s - lo] when lo <= s < hi;
// ptr is null for a row this thread does not store (past the chunk or past the CTA's rows).
// The paged kernel's rows start at key 0 (kWindowed = false: no lower bound, ptr[s]).
struct ChunkRows {
  struct Row {
    float* ptr;
    int32_t lo, hi;
  } row[2];
};

// The epilogue of one unit: a page's 64 tokens against a chunk of NC q columns. This thread holds
// tokens g and g + 8 of its warp's 16 (the wgmma D layout: acc[4c + e] is token g, column
// 8c + 2t + e; acc[4c + 2 + e] token g + 8).
template <int H, int NC, bool kWindowed>
__device__ __forceinline__ void epilogue(const float (&acc)[NC / 2], const ChunkWeights<H, NC>& wt,
                                         const float* scales, const ChunkRows& cr, int32_t s0) {
  const int lane = threadIdx.x & 31, g = lane >> 2;
  const int warp = (threadIdx.x >> 5) & 3;
  // Four independent accumulators (k-step parity x hi/lo) keep the mma chains short.
  float d[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i][0] = d[i][1] = d[i][2] = d[i][3] = 0.f;
#pragma unroll
  for (int s = 0; s < NC / 16; ++s) {
    const int c0 = 2 * s, c1 = 2 * s + 1;  // the two 8-column blocks of k-step s
    const uint32_t a0 = relu_bf16x2(acc[4 * c0 + 0], acc[4 * c0 + 1]);
    const uint32_t a1 = relu_bf16x2(acc[4 * c0 + 2], acc[4 * c0 + 3]);
    const uint32_t a2 = relu_bf16x2(acc[4 * c1 + 0], acc[4 * c1 + 1]);
    const uint32_t a3 = relu_bf16x2(acc[4 * c1 + 2], acc[4 * c1 + 3]);
    mma_bf16(d[(s & 1) * 2 + 0], a0, a1, a2, a3, wt.hi[s][0], wt.hi[s][1]);
    mma_bf16(d[(s & 1) * 2 + 1], a0, a1, a2, a3, wt.lo[s][0], wt.lo[s][1]);
  }
  float out[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) out[e] = (d[0][e] + d[2][e]) + (d[1][e] + d[3][e]);
  // out[0], out[1]: token g, chunk rows 2t, 2t + 1; out[2], out[3]: token g + 8.
  const int tok = warp * 16 + g, s = s0 + tok;
  const float sc0 = scales[tok], sc1 = scales[tok + 8];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const ChunkRows::Row& r = cr.row[i];
    if (r.ptr == nullptr) continue;
    if constexpr (kWindowed) {
      if (s >= r.lo && s < r.hi) r.ptr[s - r.lo] = out[i] * sc0;
      if (s + 8 >= r.lo && s + 8 < r.hi) r.ptr[s + 8 - r.lo] = out[2 + i] * sc1;
    } else {
      if (s < r.hi) r.ptr[s] = out[i] * sc0;
      if (s + 8 < r.hi) r.ptr[s + 8] = out[2 + i] * sc1;
    }
  }
}

// The kPages key tiles of a split (first key `begin`, `pages` of them loaded) against one chunk
// of NC q columns starting at column `col`: a rolling pipeline of K = 128 / NC units (page MMAs)
// in flight, each its own commit group; unit u's epilogue runs while units u + 1 .. u + K - 1
// compute, then unit u + K is issued into its registers. Pages past `pages` are computed on the
// stage's stale tiles and never stored (a wgmma under a branch would be serialised by the
// compiler). `scales` holds kTokens fp32 key scales per page.
template <int H, int NC, bool kWindowed, int kPages = kSplitPages>
__device__ __forceinline__ void split_chunk(const ChunkRows& cr, int32_t begin, int32_t pages,
                                            uint32_t keys_addr, const float* scales,
                                            uint32_t q_addr, const float* w, int32_t col) {
  constexpr int K = 128 / NC;
  ChunkWeights<H, NC> wt;
  wt.load(w + col);
  static_assert(K <= kPages, "the pipeline holds at most one unit per page");
  const uint32_t qa = q_addr + uint32_t(col) * kDim;
  float acc[K][NC / 2];
#pragma unroll
  for (int u = 0; u < K; ++u) {
#pragma unroll
    for (int i = 0; i < NC / 2; ++i) asm volatile("" : "=f"(acc[u][i]));  // set by scale_d = 0
  }
  auto issue = [&](float(&d)[NC / 2], int page) {
    const uint32_t ka = keys_addr + uint32_t(page) * kKeyTileBytes;
#pragma unroll
    for (int s = 0; s < kDim / 32; ++s) {
      wgmma::wgmma_m64k32_e4m3<NC>(d, kmajor_sw128_desc(ka + 32 * s),
                                   kmajor_sw128_desc(qa + 32 * s), s > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  wgmma_fence();
#pragma unroll
  for (int u = 0; u < K; ++u) issue(acc[u], u);
#pragma unroll
  for (int u = 0; u < kPages; ++u) {
    const int pending_after = (u + K <= kPages ? K : kPages - u) - 1;
    wgmma_wait_dynamic<K>(pending_after);
    fence_registers(acc[u % K]);
    if (u < pages) {
      epilogue<H, NC, kWindowed>(acc[u % K], wt, scales + u * kTokens, cr, begin + u * kTokens);
    }
    if (u + K < kPages) {
      wgmma_fence();
      issue(acc[u % K], u + K);
    }
  }
}

// A position in a ring of `stages` slots: stage index and the parity of its round, advanced
// without division.
struct RingPos {
  int32_t stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance(int32_t by, int32_t stages) {
    stage += by;
    while (stage >= stages) {
      stage -= stages;
      phase ^= 1u;
    }
  }
};

}  // namespace dsa::kernels::mqa_wgmma
