// The tensor-core core of the MQA indexer logits (SPEC.md §3d), used by the ragged kernel (the
// paged one runs on wgmma: paged_logits_wgmma.cuh): one 256-key tile in shared memory against up to
// 256 (query row, head) rows of q, with fp8 MMA (mma.sync m16n8k32 e4m3 x e4m3 -> f32, sm_89+ PTX,
// valid on sm_90a), then relu, the head weights, the head sum in fp32 and the key scale.
//
// Shared-memory layouts (both written by cp.async, 16-byte chunks, XOR-swizzled so that the
// ldmatrix phases of 8 rows x 16 bytes hit 32 distinct banks):
//   keys  [256 tokens][128 B]  e4m3, chunk c of token o at o * 128 + ((c ^ (o & 7)) * 16)
//   scale [256] fp32
//   q     [rows * H][128 B]    e4m3, row m = j * H + h (query row j, head h), same swizzle
//   w     [rows * H] fp32
// MMA operands: A = q (row-major, M = head rows, K = 128 dims in 4 k-steps of 32), B = keys
// (column-major = token-major, N = tokens). Each warp owns 32 tokens (4 n-tiles of 8) of the
// tile and keeps their B fragments in registers; it walks every m-tile (16 head rows) of q from
// shared memory, so the head sum of a query row stays inside the warp (no cross-warp reduction).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsa::kernels::mqa_mma {

inline constexpr int kTileTokens = 256;  // one split (S_tok) = 4 pages of 64
inline constexpr int kDim = 128;         // D_i
inline constexpr int kThreads = 256;     // 8 warps, 32 tokens each
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kMaxQRows = 256;  // 4 query rows x 64 heads (the group of §3b)
inline constexpr int kKeyBytes = kTileTokens * kDim;
inline constexpr int kScaleBytes = kTileTokens * 4;
inline constexpr int kQBytes = kMaxQRows * kDim;
inline constexpr int kWBytes = kMaxQRows * 4;

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a swizzled [rows][128 B] array.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t(row) * kDim + (uint32_t(chunk ^ (row & 7)) << 4);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; when !valid nothing is read and the 16 bytes are zero-filled.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
// 4-byte copy (ragged key scales, whose array may end on any element).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// D = A B + D, A 16x32 e4m3 (row), B 32x8 e4m3 (col), D 16x8 fp32.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- One warp's share of a tile ----------------------------------------------------------------
// Warp `warp` computes tokens [32 warp, 32 warp + 32) of the tile against query rows
// [0, q_rows) of `heads` heads each (q_rows * heads a multiple of 16, at most kMaxQRows), and
// calls store(j, token, v0, v1) from lanes 0..15 with the finished logits of query row j at tile
// tokens `token` and `token + 1` (token even; lanes 0..15 cover the warp's 32 tokens, so a warp's
// stores of one row are one 128-byte segment). Accumulation order is fixed (heads ascending in
// m-tiles, then a fixed butterfly), so results are deterministic.
template <class Store>
__device__ __forceinline__ void warp_tile_logits(const uint8_t* keys, const float* scales,
                                                 const uint8_t* q, const float* w, int q_rows,
                                                 int heads, Store&& store) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const uint32_t keys_addr = smem_addr(keys), q_addr = smem_addr(q);

  // B fragments of the warp's 4 n-tiles: bf[nt][c] = 16-byte chunk c of token (8 nt + g), word t;
  // k-step s uses chunks 2s (b0) and 2s + 1 (b1).
  uint32_t bf[4][8];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int token = warp * 32 + nt * 8 + (lane & 7);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t addr = keys_addr + swizzled(token, half * 4 + (lane >> 3));
      ldmatrix_x4(addr, bf[nt][half * 4 + 0], bf[nt][half * 4 + 1], bf[nt][half * 4 + 2],
                  bf[nt][half * 4 + 3]);
    }
  }

  const int mtiles = q_rows * heads / 16, mtiles_per_row = heads / 16;
  float part[4][2];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) part[nt][0] = part[nt][1] = 0.f;

  for (int mt = 0; mt < mtiles; ++mt) {
    float acc[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    // A fragment of k-step s: matrices (rows 0-7, chunk 2s), (rows 8-15, chunk 2s),
    // (rows 0-7, chunk 2s + 1), (rows 8-15, chunk 2s + 1); lane l addresses row l & 7 of
    // matrix l >> 3.
    const int a_row = mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t a[4];
      ldmatrix_x4(q_addr + swizzled(a_row, 2 * s + (lane >> 4)), a[0], a[1], a[2], a[3]);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) mma_e4m3(acc[nt], a, bf[nt][2 * s], bf[nt][2 * s + 1]);
    }
    // acc[nt][e] = dot(head row mt*16 + g, token 8 nt + 2t + e); [2 + e]: head row + 8.
    const float w0 = w[mt * 16 + g], w1 = w[mt * 16 + g + 8];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        part[nt][e] = fmaf(w0, fmaxf(acc[nt][e], 0.f), part[nt][e]);
        part[nt][e] = fmaf(w1, fmaxf(acc[nt][2 + e], 0.f), part[nt][e]);
      }
    }
    if ((mt + 1) % mtiles_per_row != 0) continue;
      // Query row j is complete: sum the 8 head groups (lanes with equal t), then lanes
      // g = 0..3 store n-tile g.
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float v = part[nt][e];
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        part[nt][e] = v;
      }
    }
    if (g < 4) {
      float v0 = 0.f, v1 = 0.f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        if (nt == g) v0 = part[nt][0], v1 = part[nt][1];
      }
      const int token = warp * 32 + g * 8 + 2 * t;
      store(mt / mtiles_per_row, token, v0 * scales[token], v1 * scales[token + 1]);
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) part[nt][0] = part[nt][1] = 0.f;
  }
}

// Copies q rows [0, rows) (each 128 B, contiguous from `src`) and their weights into a swizzled
// q area and a w area; all kThreads threads call it. rows * 4 weights are 16-byte chunks since
// rows is a multiple of 16.
__device__ __forceinline__ void load_q_async(uint8_t* q_dst, float* w_dst, const uint8_t* q_src,
                                             const float* w_src, int rows) {
  const uint32_t q_addr = smem_addr(q_dst), w_addr = smem_addr(w_dst);
  for (int x = threadIdx.x; x < rows * 8; x += kThreads) {
    cp_async16(q_addr + swizzled(x >> 3, x & 7), q_src + int64_t{x} * 16, true);
  }
  for (int x = threadIdx.x; x < rows / 4; x += kThreads) {
    cp_async16(w_addr + x * 16, w_src + int64_t{x} * 4, true);
  }
}

}  // namespace dsa::kernels::mqa_mma
