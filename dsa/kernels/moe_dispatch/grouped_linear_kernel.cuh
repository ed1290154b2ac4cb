// The grouped linear kernel: y[y_row[i]] = bf16(x[x_row[i]] W_g^T) for the pairs i of group g,
// on bf16 tensor cores (WMMA 16x16x16, fp32 accumulators). Included by moe_dispatch_cuda.cu only.
//
// One CTA computes a [64 pairs, 64 outputs] tile of one group: blockIdx.x is an m-tile slot,
// blockIdx.y the output tile. The grid is fixed by the params alone, (ceil(capacity / 64) + G) x
// ceil(out / 64): a group of n pairs needs ceil(n / 64) m-tiles <= n / 64 + 1, so the slots cover
// every group however the (device) offsets split the pairs. Each CTA reads the offsets, finds the
// group and m-tile of its slot, and exits when the slot is past the last tile.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/moe_dispatch/grouped_linear_device.cuh"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"

namespace dsa::kernels::grouped_linear_detail {

constexpr int kBM = 64;        // pairs per tile
constexpr int kBN = 64;        // outputs per tile
constexpr int kBK = 32;        // input columns per pipeline stage
constexpr int kStages = 3;     // cp.async ring: two tiles in flight while one is multiplied
constexpr int kThreads = 128;  // 4 warps in 2 x 2, each owning a 32 x 32 block of the tile
constexpr int kLd = kBK + 8;   // smem row stride (bf16): 80 bytes, so the 8 rows of a fragment
                               // load hit 8 different 16-byte bank groups; keeps 32-byte alignment
constexpr int kLdC = kBN + 4;  // fp32 staging stride of the epilogue
constexpr int kVec = 8;        // bf16 per 16-byte load (in % 8 == 0 keeps rows aligned)
constexpr unsigned kFull = 0xFFFFFFFFu;

// bf16 (a trivial struct) rather than __nv_bfloat16 in the union: shared variables may not have
// constructors. WMMA sees the same bits through a pointer cast.
struct __align__(128) Smem {
  union {
    struct {
      bf16 a[kStages][kBM][kLd];  // gathered x rows (zero past the group / in)
      bf16 b[kStages][kBN][kLd];  // W_g rows (zero past out / in)
    } ab;
    float c[kBM][kLdC];  // the fp32 tile, after the main loop
  };
  int32_t a_row[kBM];  // x row of each tile row, -1 = zero-fill (past the group, or neutralised)
  int32_t y_dst[kBM];  // y row of each tile row, -1 = not written
  int32_t group;       // -1 = no work for this CTA
  int32_t row0, row_end;
};

__device__ __forceinline__ const __nv_bfloat16* as_mma(const bf16* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

// ---- phase 1: which group and m-tile this CTA's slot `mt` is (warp 0) ----
// The offsets used are eff[g] = min(capacity, max(0, offsets[0..g])), as in the reference, so a
// bad offsets array (unchecked mode) never yields more tiles than the grid has. A warp takes 32
// groups at a time: a max-scan gives eff, a sum-scan the tiles before each group.
__device__ inline void find_tile(const GroupedLinearParams& p, int32_t mt, int lane, Smem& s) {
  int32_t carry_max = max(0, p.offsets[0]);  // max(0, offsets[0..g0])
  int32_t lo_prev = min(carry_max, p.capacity);
  int32_t tiles_before = 0;
  for (int32_t g0 = 0; g0 < p.num_groups; g0 += 32) {
    const int32_t g = g0 + lane;
    int32_t v = g < p.num_groups ? p.offsets[g + 1] : INT32_MIN;
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t t = __shfl_up_sync(kFull, v, o);
      if (lane >= o) v = max(v, t);
    }
    const int32_t hi = min(max(v, carry_max), p.capacity);  // eff[g + 1]
    int32_t lo = __shfl_up_sync(kFull, hi, 1);              // eff[g]
    if (lane == 0) lo = lo_prev;
    const int32_t n = hi - lo;  // pairs of group g (>= 0: eff is non-decreasing)
    const int32_t tiles = g < p.num_groups ? n / kBM + (n % kBM != 0) : 0;
    int32_t incl = tiles;
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t t = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += t;
    }
    const int32_t first = tiles_before + incl - tiles;
    const unsigned hit = __ballot_sync(kFull, tiles > 0 && mt >= first && mt < first + tiles);
    if (hit != 0) {
      if (lane == __ffs(hit) - 1) {
        s.group = g;
        s.row0 = lo + (mt - first) * kBM;
        s.row_end = hi;
      }
      return;
    }
    tiles_before += __shfl_sync(kFull, incl, 31);
    carry_max = max(carry_max, __shfl_sync(kFull, v, 31));
    lo_prev = __shfl_sync(kFull, hi, 31);
  }
  if (lane == 0) s.group = -1;
}

// ---- phase 2: one pipeline stage, A = x rows through a_row, B = W_g rows n0.. ----
__device__ __forceinline__ void load_stage(const GroupedLinearParams& p, const bf16* w, int32_t n0,
                                           int32_t k0, int stage, Smem& s) {
  constexpr int kVecsPerRow = kBK / kVec;  // 4
  for (int v = threadIdx.x; v < kBM * kVecsPerRow; v += kThreads) {
    const int r = v / kVecsPerRow, c = (v % kVecsPerRow) * kVec;
    const bool in_k = k0 + c < p.in_features;  // whole vector in or out: in % 8 == 0
    const int32_t xr = s.a_row[r];
    // A source that is not read (src_bytes 0) still has to be a pointer: w is never null here.
    const bool a_ok = in_k && xr >= 0;
    const bf16* a_src = a_ok ? p.x + int64_t{xr} * p.in_features + k0 + c : w;
    cp_async16(&s.ab.a[stage][r][c], a_src, a_ok ? 16 : 0);
    const bool b_ok = in_k && n0 + r < p.out_features;
    const bf16* b_src = b_ok ? w + int64_t{n0 + r} * p.in_features + k0 + c : w;
    cp_async16(&s.ab.b[stage][r][c], b_src, b_ok ? 16 : 0);
  }
}

// ---- the kernel ----
// Per CTA: [64 pairs of group g, 64 outputs] = A[64, in] . W_g[n0 : n0 + 64, in]^T, K in steps of
// 32 through a 3-stage cp.async ring; then fp32 -> bf16 (RNE) and a scatter through y_row.
// vec_out: out % 8 == 0 and y 16-byte aligned, so the epilogue stores 16 bytes at a time.
__global__ void __launch_bounds__(kThreads)
    grouped_linear_kernel(GroupedLinearParams p, bool vec_out) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  using namespace nvcuda;
  __shared__ Smem s;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (warp == 0) find_tile(p, static_cast<int32_t>(blockIdx.x), lane, s);
  __syncthreads();
  const int32_t g = s.group;
  if (g < 0) return;  // CTA-uniform
  const bf16* w = p.weights[g];
  // Checked mode reports these before the launch; here they only neutralise the group.
  if (w == nullptr || reinterpret_cast<uintptr_t>(w) % 16 != 0) return;
  if (tid < kBM) {
    const int32_t i = s.row0 + tid;
    int32_t xr = -1, yr = -1;
    if (i < s.row_end) {
      xr = pair_row(p.x_row, i, p.x_rows);
      yr = pair_row(p.y_row, i, p.y_rows);
      if (xr < 0 || yr < 0) xr = yr = -1;  // an out-of-range index skips the whole pair
    }
    s.a_row[tid] = xr;
    s.y_dst[tid] = yr;
  }
  __syncthreads();

  const int32_t n0 = static_cast<int32_t>(blockIdx.y) * kBN;
  const int32_t k_tiles = (p.in_features + kBK - 1) / kBK;
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < k_tiles) load_stage(p, w, n0, st * kBK, st, s);
    cp_async_commit();  // one group per stage, empty or not, so wait_group counts stay exact
  }

  const int wm = warp / 2, wn = warp % 2;  // this warp's 32 x 32 block
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  for (int32_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // tile kt has landed (this thread's copies)
    __syncthreads();               // ... everyone's; and tile kt - 1's stage is free again
    const int32_t next = kt + kStages - 1;
    if (next < k_tiles) load_stage(p, w, n0, next * kBK, next % kStages, s);
    cp_async_commit();
    const int st = kt % kStages;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(fa[i], as_mma(&s.ab.a[st][wm * 32 + i * 16][kk]), kLd);
      // B[k][n] = W[n][k]: the [n][k] rows in smem are B in column-major order.
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(fb[j], as_mma(&s.ab.b[st][wn * 32 + j * 16][kk]), kLd);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the A/B ring is dead; its memory becomes the fp32 tile

  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&s.c[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kLdC,
                              wmma::mem_row_major);
  __syncthreads();

  // ---- epilogue: 8 outputs per thread-step, rounded once to bf16 (RNE), scattered by y_row ----
  constexpr int kVecsPerRow = kBN / kVec;
  for (int v = tid; v < kBM * kVecsPerRow; v += kThreads) {
    const int r = v / kVecsPerRow, c = (v % kVecsPerRow) * kVec;
    const int32_t yr = s.y_dst[r], col = n0 + c;
    if (yr < 0 || col >= p.out_features) continue;
    bf16* dst = p.y + int64_t{yr} * p.out_features + col;
    if (vec_out) {
      uint32_t packed[kVec / 2];
      for (int j = 0; j < kVec / 2; ++j) {
        packed[j] = uint32_t{float_to_bf16(s.c[r][c + 2 * j]).bits} |
                    uint32_t{float_to_bf16(s.c[r][c + 2 * j + 1]).bits} << 16;
      }
      *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    } else {
      for (int j = 0; j < kVec && col + j < p.out_features; ++j)
        dst[j] = float_to_bf16(s.c[r][c + j]);
    }
  }
}

}  // namespace dsa::kernels::grouped_linear_detail
