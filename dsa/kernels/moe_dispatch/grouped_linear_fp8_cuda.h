// The FP8 form of grouped_linear_cuda (SPEC.md §8.8), internal to this op folder: the launches of
// grouped_linear_fp8_kernel.cuh and their checked-mode device checks. grouped_linear_cuda runs the
// shared host and device checks first, then these.
#pragma once

#include "dsa/core/status.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"

namespace dsa::kernels::grouped_fp8 {

// Checked mode, after the offsets pass: every x row a dispatched pair reads is finite (§2.1, the
// quantiser's contract; OutOfRange at index = the x row, value = the column) and so is every
// block scale of a group with pairs (index = g, value = the block's flat index).
Status check_device_values(const GroupedLinearParams& p);

// The row tiles per CTA the decode (N = 8) tile takes for p: 1, or 2 where one tile per CTA would
// not fit one wave and two would (grouped_linear_fp8_cuda.cu); DSA_GROUPED_FP8_ROW_TILES forces
// one. InvalidArgument for a bad switch value. Exposed so tests can assert the dispatch.
StatusOr<int> decode_row_tiles(const GroupedLinearParams& p);

// The pairs per tile (N, 8..64) the tile kernel takes for p: from the mean pairs of a group,
// capped by the capacity and max_group_pairs (grouped_linear_fp8_cuda.cu). Exposed so tests can
// assert the dispatch.
int tile_pairs(const GroupedLinearParams& p);

// Whether launch() takes the prefill form for p (grouped_linear_fp8_lt.cu: the offsets read back,
// the pairs gathered, one grouped GEMM): not while the stream captures, and only for shapes
// cuBLASLt computes right (in a multiple of 512, out of 8, 16-byte aligned outputs); then
// DSA_GROUPED_FP8_PREFILL = auto (default: at least 32 pairs a group on average, capacity / G),
// lt (always) or kernel (never). InvalidArgument for a bad switch value. Exposed so tests can
// assert the dispatch.
StatusOr<bool> takes_prefill_form(const GroupedLinearParams& p);

// The prefill form (p valid, FP8, takes_prefill_form): true when it ran; false when cuBLASLt
// offered no algorithm for a group's GEMM (the lt GEMM) or the device had no memory for the
// form's scratch (launch() then runs the tile path, which rewrites every output). Synchronises
// the stream once, to read the offsets and weight tables. DSA_GROUPED_FP8_PREFILL_GEMM = wgmma
// (default) or lt picks the GEMM; InvalidArgument for a bad value.
StatusOr<bool> launch_prefill(const GroupedLinearParams& p);

// The prefill form where takes_prefill_form says so, else the quantiser, then the tile kernel. p is
// valid and holds FP8 weights; InvalidArgument when p.scratch is missing, too small or not 256-byte
// aligned, or when the grid exceeds CUDA's limits.
Status launch(const GroupedLinearParams& p);

}  // namespace dsa::kernels::grouped_fp8
