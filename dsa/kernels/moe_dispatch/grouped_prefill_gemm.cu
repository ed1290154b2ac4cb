// The FP8 grouped linear's prefill GEMM (SPEC.md §8.8): every group's gathered, quantised rows
// times that group's block-scaled weights, all groups in one launch.
//
// The per-group cuBLASLt GEMMs it replaces ran at 13-20% of the fp8 peak even spread over eight
// streams (bench/RESULTS.md, stop 52): a group of ~128 rows is a GEMM of a few dozen CTAs, and 256
// of them a projection are 256 launches. Here a CTA owns one tile of 128 rows of one group's run
// by 128 outputs, and the grid is every (tile, output block) of the chunk, the tiles of one group
// adjacent so its token rows and weights are read from L2 by the neighbours.
//
// Orientation as DeepGEMM's: the tokens are wgmma's A (M = 64 rows per consumer warpgroup, two
// warpgroups), the weight tile B (N = 128 outputs, K-major as the checkpoint stores it). Per
// 128-wide K block a producer thread copies the token tile [128][128 B] (the chunk's tensor map, a
// kernel parameter) and the weight tile [128][128 B] (the group's tensor map, encoded on the host
// and read from global memory) into a ring of stages completing on mbarriers. Each consumer
// warpgroup runs four m64n128k32 e4m3 steps into fresh accumulators, then promotes them into its
// fp32 sums scaled by sw[block] * sx[row][block] — the per-block promotion §8.8 requires; while one
// warpgroup promotes, the other's MMA runs. A thread's accumulators cover two rows, so a block's
// scales are two products, their loads issued two blocks ahead.
//
// Rows of the tile past the run's real pairs (the next run's rows, padding, or past the chunk:
// zero-filled by the copy) are computed and never stored; a warpgroup whose 64 rows are all past
// them skips its MMA but still releases the stages.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "dsa/core/dtype.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/tensor_map.h"
#include "dsa/kernels/common/hopper_async.cuh"
#include "dsa/kernels/common/wgmma_e4m3_ops.cuh"
#include "dsa/kernels/moe_dispatch/grouped_prefill_gemm.h"

namespace dsa::kernels::grouped_fp8 {

namespace prefill_gemm {

namespace {

using namespace hopper;  // NOLINT: the kernel's building blocks

inline constexpr int kStages = 6;
inline constexpr int kTokenTileBytes = kTileRows * kBlock;   // 16 KiB
inline constexpr int kWeightTileBytes = kTileCols * kBlock;  // 16 KiB
inline constexpr int kStageBytes = kTokenTileBytes + kWeightTileBytes;
inline constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the base alignment
inline constexpr int kConsumerThreads = 256;
inline constexpr int kThreads = 128 + kConsumerThreads;  // a producer warpgroup, two consumers
inline constexpr int kProducerRegs = 40;
inline constexpr int kConsumerRegs = 232;
static_assert(128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= 65536,
              "the register file of one SM");

// grid = tiles x col_blocks, output blocks fastest; block = kThreads; kSmemBytes dynamic.
__global__ void __launch_bounds__(kThreads, 1)
    grouped_prefill_gemm_kernel(const __grid_constant__ CUtensorMap tokens, const Args a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  // Aligned up by pointer arithmetic on the shared array itself, so every access stays a
  // shared-memory one.
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  __shared__ uint64_t full[kStages], empty[kStages];
  const int tid = threadIdx.x;
  const int col_blocks = (a.out + kTileCols - 1) / kTileCols;
  const Tile tile = a.tiles[blockIdx.x / col_blocks];
  const int col_block = static_cast<int>(blockIdx.x % col_blocks);
  const int nkb = a.nkb;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerThreads);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (tid < 128) {  // the producer warpgroup: one thread issues every copy
    regs_release<kProducerRegs>();
    if (tid == 0) {
      const CUtensorMap* weights = a.weight_maps + tile.weight;
      // The weight maps were written to global memory by a host copy (and the region is reused by
      // later calls with other maps): acquire them for the tensor-map proxy before the copy engine
      // reads one, or it may use a stale cached map.
      asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;\n" ::"l"(
                       reinterpret_cast<uint64_t>(weights))
                   : "memory");
      prefetch_tensor_map(&tokens);
      prefetch_tensor_map(weights);
      for (int i = 0; i < nkb; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(&empty[s], ((i / kStages) - 1) & 1);
        uint8_t* stage = smem + s * kStageBytes;
        mbar_arrive_expect_tx(&full[s], kStageBytes);
        tma_load_2d(stage, &tokens, &full[s], i * kBlock, tile.row0);
        tma_load_2d(stage + kTokenTileBytes, weights, &full[s], i * kBlock, col_block * kTileCols);
      }
    }
    return;
  }

  regs_claim<kConsumerRegs>();
  const int ctid = tid - 128, wg = ctid / 128, warp = (ctid / 32) % 4, lane = tid % 32;
  // This thread's rows of the tile: r and r + 8; its columns 8 c + 2 q + {0, 1}.
  const int r = wg * 64 + 16 * warp + lane / 4, q = lane % 4;
  const bool active = wg * 64 < tile.rows;  // warpgroup-uniform
  const float* sw = a.weight_scales[tile.weight] + int64_t{col_block} * nkb;
  const float* sx = a.sx + int64_t{tile.run0} * nkb;
  const int lo = tile.row0 - tile.run0 + r, hi = lo + 8;  // the rows within the run
  const bool lo_ok = r < tile.rows, hi_ok = r + 8 < tile.rows;
  // Block i's scales of this thread's two rows, as loaded: multiplied only where used, so the
  // loads of blocks i + 1 and i + 2 stay in flight while block i is computed. (Loaded and
  // multiplied at once, each block waited a full L2 round trip before its promotion: the first
  // landed form, 17.6-21.5% of the fp8 peak on the H100.)
  struct Scales {
    float w = 0.f, lo = 0.f, hi = 0.f;
  };
  const auto fetch = [&](int i) {
    Scales f;
    if (!active || i >= nkb) return f;
    const float* sxk = sx + int64_t{i} * tile.run_rows;
    f.w = sw[i];
    f.lo = lo_ok ? sxk[lo] : 0.f;
    f.hi = hi_ok ? sxk[hi] : 0.f;
    return f;
  };
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = 0.f;
  float d[64];
  Scales cur = fetch(0), next = fetch(1);
  for (int i = 0; i < nkb; ++i) {
    const int s = i % kStages;
    const Scales later = fetch(i + 2);
    mbar_wait(&full[s], (i / kStages) & 1);
    if (active) {
      const uint32_t ta = smem_u32(smem + s * kStageBytes) + wg * (kTokenTileBytes / 2);
      const uint32_t wb = smem_u32(smem + s * kStageBytes + kTokenTileBytes);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBlock / 32; ++k) {
        wgmma::wgmma_m64n128k32_e4m3(d, kmajor_sw128_desc(ta + 32 * k),
                                     kmajor_sw128_desc(wb + 32 * k), k > 0 ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(d);
    }
    mbar_arrive(&empty[s]);  // this thread's reads of the stage are done
    if (active) {
      const float s_lo = cur.lo * cur.w, s_hi = cur.hi * cur.w;  // exact: sx is a power of two
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        acc[4 * c + 0] = fmaf(d[4 * c + 0], s_lo, acc[4 * c + 0]);
        acc[4 * c + 1] = fmaf(d[4 * c + 1], s_lo, acc[4 * c + 1]);
        acc[4 * c + 2] = fmaf(d[4 * c + 2], s_hi, acc[4 * c + 2]);
        acc[4 * c + 3] = fmaf(d[4 * c + 3], s_hi, acc[4 * c + 3]);
      }
    }
    cur = next;
    next = later;
  }
  if (!active) return;
  bf16* const out = tile.second != 0 ? a.c_b : a.c;
#pragma unroll
  for (int c = 0; c < 16; ++c) {
    const int col = col_block * kTileCols + 8 * c + 2 * q;
    if (col >= a.out) continue;  // out % 8 == 0: col + 1 is in range too
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!(h == 0 ? lo_ok : hi_ok)) continue;
      const int64_t row = tile.row0 + r + 8 * h;
      const uint32_t v = uint32_t{float_to_bf16(acc[4 * c + 2 * h]).bits} |
                         (uint32_t{float_to_bf16(acc[4 * c + 2 * h + 1]).bits} << 16);
      *reinterpret_cast<uint32_t*>(out + row * a.out + col) = v;
    }
  }
}

std::mutex g_maps_mutex;
// Never destroyed (used until exit); a map is 128 bytes, one per expert projection.
std::map<std::tuple<const uint8_t*, int32_t, int32_t>, CUtensorMap>* g_maps = nullptr;

}  // namespace

Status weight_map(const uint8_t* w, int32_t in, int32_t out, CUtensorMap* map) {
  std::lock_guard<std::mutex> lock(g_maps_mutex);
  if (g_maps == nullptr)
    g_maps = new std::map<std::tuple<const uint8_t*, int32_t, int32_t>, CUtensorMap>();
  const auto key = std::make_tuple(w, in, out);
  auto it = g_maps->find(key);
  if (it == g_maps->end()) {
    CUtensorMap fresh;
    DSA_RETURN_IF_ERROR(cuda::byte_rows_map(w, out, in, kTileCols, &fresh));
    it = g_maps->emplace(key, fresh).first;
  }
  *map = it->second;
  return ok_status();
}

Status token_map(const uint8_t* x8, int32_t rows, int32_t in, CUtensorMap* map) {
  return cuda::byte_rows_map(x8, rows, in, kTileRows, map);
}

Status launch(const CUtensorMap& tokens, const Args& a, cudaStream_t stream) {
  if (a.num_tiles == 0) return ok_status();
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<grouped_prefill_gemm_kernel>(kSmemBytes));
  const int64_t col_blocks = (a.out + kTileCols - 1) / kTileCols;
  const int64_t grid = int64_t{a.num_tiles} * col_blocks;
  if (grid > int64_t{0x7fffffff}) {
    return invalid_argument("grouped prefill GEMM: " + std::to_string(grid) +
                            " CTAs exceed the grid's x limit");
  }
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(grid)), dim3(kThreads),
                                     size_t{kSmemBytes}, stream},
                   grouped_prefill_gemm_kernel, tokens, a));
  return cuda::launch_error("grouped_linear_fp8_prefill_gemm");
}

}  // namespace prefill_gemm

}  // namespace dsa::kernels::grouped_fp8
