// The FP8 grouped linear kernels (SPEC.md §8.6, §8.8): y[y_row[i]] = bf16(x[x_row[i]] W_g^T) for
// the pairs i of group g, W_g e4m3 with 128 x 128 fp32 block scales. Included by
// grouped_linear_fp8_cuda.cu only.
//
// Decode is the case that matters (a few pairs per expert, 256 experts): the op is bound by the
// expert weight stream, so each CTA reads its 64 rows of W_g exactly once and multiplies them by
// all its pairs at once. Two launches:
//   1. quantize_rows_kernel: every x row per (row, 128 columns) with §2.1's power-of-two rule
//      into scratch (x8 [x_rows][in] e4m3, sx [x_rows][nkb]), through the same DSA_HD helpers as
//      the CPU reference, so the codes and scales are bit-identical to linear_ref's.
//   2. grouped_linear_fp8_kernel<N>: one CTA (one warpgroup) per [64 outputs, N pairs] tile of
//      one group, or per `row_tiles` such tiles in a row (one ring streams them all, so a decode
//      grid too large for one wave can be halved; grouped_linear_fp8_cuda.cu, row_tiles). The MMA
//      is "swapped" as in linear_fp8_wgmma.cuh: the weight tile is wgmma's A (M = 64 rows, K-major
//      as stored) and the pairs' quantised rows are B (N = 8..64), so a single pair still fills the
//      tensor core's M side. Per 128-wide K block (one scale block) the weight tile [64][128 B] and
//      the pair tile [N][128 B] arrive by 16-byte cp.async into a ring of stages in the 128-byte
//      swizzle (chunk c of row r at 16 (c ^ (r % 8))), then four wgmma m64nNk32 e4m3 steps run into
//      fresh accumulators, which are promoted into the fp32 sums scaled by sw[block] *
//      sx[pair][block]: the per-block promotion §8.8 requires. cp.async rather than the tensor copy
//      engine: each group has its own weight pointer, read on the device, and a tensor map per
//      group would have to be built on the host.
// The grid is fixed by the params alone, (m + (capacity - m) / N) x ceil(ceil(out / 64) /
// row_tiles) (twice that along y for the paired form) with
// m = min(G, capacity): a group of n > 0 pairs needs ceil(n / N) <= (n - 1) / N + 1 tiles, and at
// most m groups have pairs, so the slots cover any split of the (device) offsets. Each CTA finds
// its group and tile on the device and exits when its slot is past the last tile: no host
// synchronisation, nothing allocated, so the launch can be captured in a CUDA graph.
//
// What bounds it: one K block is waited, multiplied and promoted before the next (no second
// accumulator set, unlike linear_fp8_wgmma.cuh), with kStages - 1 blocks of loads in flight per
// CTA to keep the weight stream going and the next block's scales loaded under the MMA; the loads
// are issued by the same warpgroup (no producer warp). Wide N tiles (prefill) are far from the
// fp8 tensor-core peak: each group's weights are re-read once per N pairs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/cuda/pdl.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/wgmma_e4m3_ops.cuh"
#include "dsa/kernels/moe_dispatch/grouped_fp8_quantize.cuh"
#include "dsa/kernels/moe_dispatch/grouped_linear_device.cuh"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"

namespace dsa::kernels::grouped_fp8 {

using namespace hopper;  // NOLINT: the kernel's building blocks

inline constexpr int kTileRows = 64;  // outputs per tile: wgmma's M
inline constexpr int kBlock = 128;    // K per stage: one scale block, one 128-byte swizzle row
inline constexpr int kThreads = 128;  // one warpgroup issues the copies and runs the MMA
// The ring's stages: 6 by default; at 4 more N = 8 CTAs share an SM (4 x 9 KB + 1 KB of shared
// memory each, against four CTAs at 6), so a larger decode grid runs in one wave (the launcher's
// choice: grouped_linear_fp8_cuda.cu, decode_stages).
inline constexpr int kStages = 6;
inline constexpr int kWeightTileBytes = kTileRows * kBlock;  // 8192
inline constexpr int kChunks = kBlock / 16;                  // 16-byte chunks per tile row

template <int N>
inline constexpr int kStageBytes = kWeightTileBytes + N* kBlock;  // a multiple of 1024
template <int N, int S = kStages>
inline constexpr int kSmemBytes = S* kStageBytes<N> + 1024;  // + the base alignment

// ---- 1. the row quantiser: one warp per (row, block), 4 values per lane ----
__global__ void __launch_bounds__(kQuantWarps * 32)
    quantize_rows_kernel(const bf16* x, int32_t rows, int32_t in, int32_t nkb, uint8_t* x8,
                         float* sx) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  int32_t t = 0, k = 0;
  if (!quant_item(rows, nkb, &t, &k)) return;  // warp-uniform
  const int lane = threadIdx.x % 32;
  const int32_t j0 = k * kBlock, m = min(kBlock, in - j0);  // m % 16 == 0
  const float scale =
      quantize_block_warp(x + int64_t{t} * in + j0, m, x8 + int64_t{t} * in + j0, lane);
  if (lane == 0) sx[int64_t{t} * nkb + k] = scale;
}

// ---- 2a. which group and tile slot `mt` is (one warp) ----
struct TileSlot {
  int32_t group;  // -1 = no work for this CTA
  int32_t row0, row_end;
};

// The offsets used are eff[g] = min(capacity, max(0, offsets[0..g])), as in the reference, so a
// bad offsets array (unchecked mode) never yields more tiles than the grid has. 32 groups at a
// time: a max-scan gives eff, a sum-scan the tiles before each group.
template <int kTile>
__device__ void find_tile(const GroupedLinearParams& p, int32_t mt, int lane, TileSlot* out) {
  int32_t carry_max = max(0, p.offsets[0]);
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
    const int32_t n = hi - lo;
    const int32_t tiles = g < p.num_groups ? (n + kTile - 1) / kTile : 0;
    int32_t incl = tiles;
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t t = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += t;
    }
    const int32_t first = tiles_before + incl - tiles;
    const unsigned hit = __ballot_sync(kFull, tiles > 0 && mt >= first && mt < first + tiles);
    if (hit != 0) {
      if (lane == __ffs(hit) - 1) *out = TileSlot{g, lo + (mt - first) * kTile, hi};
      return;
    }
    tiles_before += __shfl_sync(kFull, incl, 31);
    carry_max = max(carry_max, __shfl_sync(kFull, v, 31));
    lo_prev = __shfl_sync(kFull, hi, 31);
  }
  if (lane == 0) out->group = -1;
}

// ---- 2b. one stage: W_g rows n0.. and the pairs' quantised rows, K block kb ----
// Rows past out / in and pairs without a valid row are zero-filled (src_bytes 0; the source
// must still be a valid address: w).
template <int N>
__device__ __forceinline__ void load_stage(uint8_t* stage, const uint8_t* w, const uint8_t* x8,
                                           const int32_t* x_of, int32_t n0, int32_t kb, int32_t in,
                                           int32_t out) {
  const int32_t k0 = kb * kBlock;
  for (int v = threadIdx.x; v < kTileRows * kChunks; v += kThreads) {
    const int r = v / kChunks, c = v % kChunks;
    const bool ok = n0 + r < out && k0 + 16 * c < in;  // whole chunk in or out: in % 16 == 0
    const uint8_t* src = ok ? w + int64_t{n0 + r} * in + k0 + 16 * c : w;
    grouped_linear_detail::cp_async16(stage + r * kBlock + ((c ^ (r & 7)) << 4), src, ok ? 16 : 0);
  }
  uint8_t* xs = stage + kWeightTileBytes;
  for (int v = threadIdx.x; v < N * kChunks; v += kThreads) {
    const int r = v / kChunks, c = v % kChunks;
    const int32_t xr = x_of[r];
    const bool ok = xr >= 0 && k0 + 16 * c < in;
    const uint8_t* src = ok ? x8 + int64_t{xr} * in + k0 + 16 * c : w;
    grouped_linear_detail::cp_async16(xs + r * kBlock + ((c ^ (r & 7)) << 4), src, ok ? 16 : 0);
  }
}

// ---- 2c. the tile kernel ----
// x8 / sx: the quantiser's output. Thread `lane` of warp `warp` holds, for each 8-pair group c,
// D[r][t], D[r][t + 1], D[r + 8][t], D[r + 8][t + 1] with r = 16 warp + lane / 4 (an output
// row of the tile) and t = 8 c + 2 (lane % 4) (a pair of the tile).
template <int N, int S>
__global__ void __launch_bounds__(kThreads)
    grouped_linear_fp8_kernel(GroupedLinearParams p, const uint8_t* x8, const float* sx,
                              int32_t nkb, int32_t row_tiles) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  __shared__ TileSlot slot;
  __shared__ int32_t x_of[N], y_of[N];  // per pair of the tile; -1 = no pair / skipped
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (warp == 0) find_tile<N>(p, static_cast<int32_t>(blockIdx.x), lane, &slot);
  __syncthreads();
  const int32_t g = slot.group;
  if (g < 0) return;  // CTA-uniform
  // The paired form's second projection owns the upper half of gridDim.y.
  const bool paired = p.y_b != nullptr;
  const int32_t half_y = static_cast<int32_t>(paired ? gridDim.y / 2 : gridDim.y);
  const bool second = paired && static_cast<int32_t>(blockIdx.y) >= half_y;
  const int32_t cta_y = static_cast<int32_t>(blockIdx.y) - (second ? half_y : 0);
  bf16* const y = second ? p.y_b : p.y;
  const uint8_t* w = (second ? p.weights_fp8_b : p.weights_fp8)[g];
  const float* sw = (second ? p.weight_scales_b : p.weight_scales)[g];
  // Checked mode reports these before the launch; here they only neutralise the group.
  if (w == nullptr || sw == nullptr || reinterpret_cast<uintptr_t>(w) % 16 != 0) return;
  const int32_t in = p.in_features, out = p.out_features;
  // This CTA's row tiles: [tile0, tile0 + tiles) of the projection's ceil(out / 64).
  const int32_t tile0 = cta_y * row_tiles;
  const int32_t tiles = min(row_tiles, (out + kTileRows - 1) / kTileRows - tile0);
  if (tiles <= 0) return;  // CTA-uniform
  if (tid < N) {
    const int32_t i = slot.row0 + tid;
    int32_t xr = -1, yr = -1;
    if (i < slot.row_end) {
      xr = grouped_linear_detail::pair_row(p.x_row, i, p.x_rows);
      yr = grouped_linear_detail::pair_row(p.y_row, i, p.y_rows);
      if (xr < 0 || yr < 0) xr = yr = -1;  // an out-of-range index skips the whole pair
    }
    x_of[tid] = xr;
    y_of[tid] = yr;
  }
  __syncthreads();

  // One ring over the CTA's steps: step s is K block s % nkb of row tile tile0 + s / nkb, so the
  // next tile's first blocks stream while the current tile's last ones are multiplied.
  const int32_t steps = tiles * nkb;
  const auto n0_of = [&](int32_t step) { return (tile0 + step / nkb) * kTileRows; };
  for (int s = 0; s < S - 1; ++s) {
    if (s < steps)
      load_stage<N>(smem + s * kStageBytes<N>, w, x8, x_of, n0_of(s), s % nkb, in, out);
    grouped_linear_detail::cp_async_commit();  // one group per stage, so the counts stay exact
  }

  // Step s's scales for this thread's pairs: sw * sx[pair] (exact: sx is 2^e); a 64-row tile lies
  // in one scale row. Loaded one step ahead, while the previous step's MMA runs, so their latency
  // is off the loop's path.
  const auto load_scales = [&](int32_t step, float(&to)[N / 4]) {
    const int32_t kb = step % nkb;
    const float swk = sw[int64_t{n0_of(step) / kBlock} * nkb + kb];
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int32_t xr = x_of[8 * c + 2 * (lane % 4) + h];
        to[2 * c + h] = xr >= 0 ? sx[int64_t{xr} * nkb + kb] * swk : 0.f;
      }
    }
  };
  // Epilogue of the tile at rows n0: one RNE rounding per output, scattered through y_row.
  const int r = 16 * warp + lane / 4;
  const auto store_tile = [&](int32_t n0, const float(&acc)[N / 2]) {
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int32_t col = n0 + r + (e >= 2 ? 8 : 0);
        const int32_t yr = y_of[8 * c + 2 * (lane % 4) + (e & 1)];
        if (yr < 0 || col >= out) continue;
        y[int64_t{yr} * out + col] = float_to_bf16(acc[4 * c + e]);
      }
    }
  };
  float acc[N / 2] = {};
  float d[N / 2], sc[N / 4], sc_next[N / 4] = {};
  load_scales(0, sc);
  for (int32_t step = 0; step < steps; ++step) {
    grouped_linear_detail::cp_async_wait<S - 2>();  // step landed (this thread's part)
    fence_proxy_async_smem();                       // ... visible to wgmma
    __syncthreads();  // everyone's part; and the previous step's MMA is done, its stage free
    const int32_t next = step + S - 1;
    if (next < steps) {
      load_stage<N>(smem + (next % S) * kStageBytes<N>, w, x8, x_of, n0_of(next), next % nkb, in,
                    out);
    }
    grouped_linear_detail::cp_async_commit();

    const uint32_t wa = smem_u32(smem + (step % S) * kStageBytes<N>);
    const uint32_t xa = wa + kWeightTileBytes;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kBlock / 32; ++k) {
      wgmma::wgmma_m64k32_e4m3<N>(d, kmajor_sw128_desc(wa + 32 * k), kmajor_sw128_desc(xa + 32 * k),
                                  k > 0 ? 1 : 0);
    }
    wgmma_commit();
    if (step + 1 < steps) load_scales(step + 1, sc_next);
    wgmma_wait<0>();
    fence_registers(d);
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      acc[4 * c + 0] = fmaf(d[4 * c + 0], sc[2 * c], acc[4 * c + 0]);
      acc[4 * c + 1] = fmaf(d[4 * c + 1], sc[2 * c + 1], acc[4 * c + 1]);
      acc[4 * c + 2] = fmaf(d[4 * c + 2], sc[2 * c], acc[4 * c + 2]);
      acc[4 * c + 3] = fmaf(d[4 * c + 3], sc[2 * c + 1], acc[4 * c + 3]);
    }
#pragma unroll
    for (int j = 0; j < N / 4; ++j) sc[j] = sc_next[j];
    if (step % nkb == nkb - 1) {  // the tile's last K block: its outputs, then a fresh sum
      store_tile(n0_of(step), acc);
#pragma unroll
      for (int j = 0; j < N / 2; ++j) acc[j] = 0.f;
    }
  }
  grouped_linear_detail::cp_async_wait<0>();  // only empty groups remain; leave none behind
}

}  // namespace dsa::kernels::grouped_fp8
