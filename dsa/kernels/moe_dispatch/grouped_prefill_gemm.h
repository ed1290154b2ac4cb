// The FP8 grouped linear's prefill GEMM (grouped_prefill_gemm.cu): every group's gathered,
// quantised chunk rows times that group's block-scaled weights, in one launch per chunk. The
// host side of the prefill form (grouped_linear_fp8_lt.cu) builds its tiles and weight maps.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/moe_dispatch/grouped_prefill_plan.h"

namespace dsa::kernels::grouped_fp8 {

namespace prefill_gemm {

inline constexpr int kTileRows = 128;  // token rows per CTA: two warpgroups of wgmma's M = 64
inline constexpr int kTileCols = 128;  // outputs per CTA: wgmma's N, one weight scale block
inline constexpr int kBlock = 128;     // K per stage: one scale block, one 128-byte swizzle row

// A CTA's row tile (grouped_prefill_plan.h); rows in 1..kTileRows.
using Tile = PrefillTile;

struct Args {
  const CUtensorMap* weight_maps = nullptr;     // [weights] in device memory, 64-byte aligned
  const float* const* weight_scales = nullptr;  // [weights] -> [ceil(out/128)][nkb], device
  const Tile* tiles = nullptr;                  // [tiles], device
  int32_t num_tiles = 0;
  const float* sx = nullptr;  // the chunk's token scales
  bf16* c = nullptr;          // [chunk rows][out]
  bf16* c_b = nullptr;
  int32_t nkb = 0;  // in / 128
  int32_t out = 0;  // a multiple of 8
};

// The map of a [out][in] e4m3 weight in the layout the kernel reads (boxes of 128 outputs by 128
// bytes, 128-byte swizzle); cached per (pointer, shape), which is all a map encodes, so a freed
// and reused address still gets the right one.
// InvalidArgument for a map the driver refuses.
Status weight_map(const uint8_t* w, int32_t in, int32_t out, CUtensorMap* map);

// The map of the chunk's quantised rows x8 [rows][in] (boxes of 128 rows by 128 bytes).
Status token_map(const uint8_t* x8, int32_t rows, int32_t in, CUtensorMap* map);

// Launches the GEMM of a.num_tiles tiles by every output block on `stream`.
Status launch(const CUtensorMap& tokens, const Args& a, cudaStream_t stream);

}  // namespace prefill_gemm

}  // namespace dsa::kernels::grouped_fp8
