// The FP8 grouped linear's launches (see grouped_linear_fp8_cuda.h and the kernel header). Every
// launch configuration depends only on the params; nothing is allocated (the quantised rows go
// to the caller's scratch) and nothing is synchronised outside checked mode.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dsa/core/env_switch.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/moe_dispatch/grouped_linear_fp8_cuda.h"
#include "dsa/kernels/moe_dispatch/grouped_linear_fp8_kernel.cuh"

namespace dsa::kernels::grouped_fp8 {

namespace {

constexpr int kCheckThreads = 256;
constexpr int kCheckCtas = 256;  // the x pass: a grid-stride over (pair, column)

int32_t blocks_of(int32_t n) { return (n + kBlock - 1) / kBlock; }
size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Pairs [0, eff[G]) (clamped into [0, capacity]: the offsets pass may have been deferred by a
// graph capture, and this pass must still stay inside x_row): a non-finite value of a row one
// reads. The first report wins, so which bad element is named can vary; that one is bad.
__global__ void __launch_bounds__(kCheckThreads)
    check_x_kernel(GroupedLinearParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t pairs = min(max(p.offsets[p.num_groups], 0), p.capacity);
  const int64_t n = pairs * p.in_features;
  for (int64_t e = int64_t{blockIdx.x} * kCheckThreads + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * kCheckThreads) {
    const int32_t i = static_cast<int32_t>(e / p.in_features);
    const int32_t j = static_cast<int32_t>(e % p.in_features);
    const int32_t xr = p.x_row != nullptr ? p.x_row[i] : i;
    if (xr < 0 || xr >= p.x_rows) continue;  // the row pass reports it
    if (!isfinite(bf16_to_float(p.x[int64_t{xr} * p.in_features + j]))) {
      cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp, xr, j);
    }
  }
}

// One CTA per group: the block scales of a group with pairs (null ones: the weights pass).
__global__ void __launch_bounds__(kCheckThreads)
    check_scales_kernel(GroupedLinearParams p, int32_t scale_blocks, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t g = static_cast<int32_t>(blockIdx.x);
  if (p.offsets[g + 1] <= p.offsets[g]) return;
  const float* s = p.weight_scales[g];
  if (s == nullptr) return;
  for (int32_t b = threadIdx.x; b < scale_blocks; b += kCheckThreads) {
    if (!isfinite(s[b])) {
      cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp, g, b);
    }
  }
}

}  // namespace

// Pairs per tile: about four times the mean pairs of a group (the routing is uneven), a power
// of two in [8, 64], never wider than the capacity or a group (max_group_pairs) needs. Decode
// (capacity <= G) takes 8, and so does a MoE of at most 8 rows: the decode-equivalent V3.2's
// 4-row verify (9 groups of 4 pairs each) took 16 by the mean rule, whose six-stage ring fits
// three CTAs an SM (8's: four, or five at four stages), and ran its gate/up at 148 µs and down at
// 73 against a decode's 106 and 53 (ncu, H100, bench/RESULTS.md 2026-12-06).
int tile_pairs(const GroupedLinearParams& p) {
  const int64_t mean = (int64_t{p.capacity} + p.num_groups - 1) / p.num_groups;
  int64_t want = std::min<int64_t>(4 * mean, p.capacity);
  if (p.max_group_pairs > 0) want = std::min<int64_t>(want, p.max_group_pairs);
  int n = 8;
  while (n < 64 && n < want) n *= 2;
  return n;
}

namespace {

// The ring depth of the N = 8 (decode) tiles, from the CTAs that can have work (busy_ctas). Six
// stages (55 KB of shared memory) fit four CTAs in an SM; four stages (37 KB) fit five (38 KB with
// the static and reserved shared memory; six would need 234 KB of the SM's 228). A launch past four
// CTAs per SM takes four stages: V3.2's decode with the shared expert as a ninth group (9 x 64
// gate/up tiles on 132 SMs) then runs in one wave instead of two. Smaller grids keep six (eight
// groups' gate/up with every tile at four stages measured 1% slower; bench/RESULTS.md 2026-12-06).
// DSA_GROUPED_FP8_DECODE_STAGES = 4 or 6 forces one. Same arithmetic either way (the K blocks are
// accumulated in order); read per call so a test can run both.
StatusOr<int> decode_stages(int64_t ctas) {
  DSA_ASSIGN_OR_RETURN(const std::string_view forced,
                       env_choice("DSA_GROUPED_FP8_DECODE_STAGES", {"4", "6"}, "auto"));
  if (forced != "auto") return forced == "4" ? 4 : kStages;
  DSA_ASSIGN_OR_RETURN(const int sms, cuda::sm_count());
  return ctas > int64_t{4} * sms ? 4 : kStages;
}

// The tile grid for N pairs per tile and `row_tiles` row tiles per CTA: `slots` along x (see the
// kernel's header), the output tiles' CTAs along y, the second projection's after the first's (the
// kernel splits gridDim.y).
struct TileGrid {
  int64_t slots, n_tiles;
};
TileGrid tile_grid(const GroupedLinearParams& p, int n, int row_tiles = 1) {
  const int64_t m = std::min<int64_t>(p.num_groups, p.capacity);
  const int64_t tiles = (int64_t{p.out_features} + kTileRows - 1) / kTileRows;
  return {m + (int64_t{p.capacity} - m) / n,
          (tiles + row_tiles - 1) / row_tiles * (p.y_b != nullptr ? 2 : 1)};
}

// The decode tile's CTAs that can have work when every group fits one tile: the min(G, capacity)
// slots' (the grid's further (capacity - m) / 8 slots serve groups of more than 8 pairs and exit at
// once otherwise: always at capacity <= G and at max_group_pairs <= 8, the decode and the MoE of
// at most 8 rows). The wave rules below count these; where groups need several tiles they count
// too few, which costs speed only.
int64_t busy_ctas(const GroupedLinearParams& p, int row_tiles) {
  return std::min<int64_t>(p.num_groups, p.capacity) * tile_grid(p, 8, row_tiles).n_tiles;
}

template <int N, int S>
Status launch_tiles(const GroupedLinearParams& p, const uint8_t* x8, const float* sx, int32_t nkb,
                    int row_tiles) {
  constexpr size_t kSmem = kSmemBytes<N, S>;
  DSA_RETURN_IF_ERROR((cuda::allow_dynamic_smem_once<grouped_linear_fp8_kernel<N, S>>(kSmem)));
  const auto [slots, n_tiles] = tile_grid(p, N, row_tiles);
  if (slots > INT32_MAX || n_tiles > 65535) {
    return invalid_argument("grouped_linear_cuda: capacity = " + std::to_string(p.capacity) +
                            ", num_groups = " + std::to_string(p.num_groups) + ", out_features = " +
                            std::to_string(p.out_features) + ": the grid exceeds the CUDA limits");
  }
  const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(n_tiles));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(grid), dim3(kThreads), kSmem, cuda::current_stream()},
                   grouped_linear_fp8_kernel<N, S>, p, x8, sx, nkb, int32_t{row_tiles}));
  return cuda::launch_error("grouped_linear_fp8");
}

}  // namespace

// Row tiles per CTA of the N = 8 (decode) tiles: 2 where one tile per CTA would not fit one wave
// even with the 4-stage ring (five CTAs per SM) and two tiles per CTA would. V3.2's down
// projection with the shared expert as a ninth group is 9 x 112 CTAs on 132 SMs, one and a half
// waves at one tile each (the second wave's CTAs each stream 16 K blocks on emptier SMs); at two
// tiles it is 9 x 56, one wave. A grid of several waves either way keeps one tile per CTA: its
// waves are full, while at two tiles its last wave is a part-filled one of CTAs twice as long
// (measured: 7168 -> 2048 at 64 pairs, 2048 CTAs, 324 µs at one tile and 390 at two). The count is
// busy_ctas' (V3.2's 4-row verify: 12 slots, 9 busy).
// Same arithmetic either way (each tile sums its K blocks in order from zero).
// DSA_GROUPED_FP8_ROW_TILES = 1 or 2 forces one; read per call so a test can run both.
StatusOr<int> decode_row_tiles(const GroupedLinearParams& p) {
  DSA_ASSIGN_OR_RETURN(const std::string_view forced,
                       env_choice("DSA_GROUPED_FP8_ROW_TILES", {"1", "2"}, "auto"));
  if (forced != "auto") return forced == "1" ? 1 : 2;
  DSA_ASSIGN_OR_RETURN(const int sms, cuda::sm_count());
  const int64_t wave = int64_t{5} * sms;
  return busy_ctas(p, 1) > wave && busy_ctas(p, 2) <= wave ? 2 : 1;
}

Status check_device_values(const GroupedLinearParams& p) {
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(kCheckCtas), dim3(kCheckThreads), size_t(0), cuda::current_stream()},
      check_x_kernel, p, err));
  DSA_RETURN_IF_ERROR(cuda::end_launch("grouped_linear_check_x", /*checked=*/true,
                                       "grouped_linear: x[index][value] is not finite (the row "
                                       "of a dispatched pair; FP8 activation quantisation, §2.1)"));
  const int32_t scale_blocks = blocks_of(p.out_features) * blocks_of(p.in_features);
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(p.num_groups), dim3(kCheckThreads), size_t(0), cuda::current_stream()},
      check_scales_kernel, p, scale_blocks, err));
  return cuda::end_launch("grouped_linear_check_scales", /*checked=*/true,
                          "grouped_linear: weight_scales[index][value] is not finite (a group "
                          "with pairs)");
}

Status launch(const GroupedLinearParams& p) {
  const size_t need = grouped_linear_scratch_bytes(p);
  if (need > 0 && (p.scratch == nullptr || p.scratch_bytes < need)) {
    return invalid_argument(
        "grouped_linear_cuda: scratch_bytes = " +
        std::to_string(p.scratch == nullptr ? 0 : p.scratch_bytes) +
        (p.scratch == nullptr ? " (scratch is null)" : "") +
        ": FP8 weights need grouped_linear_scratch_bytes = " + std::to_string(need));
  }
  DSA_RETURN_IF_ERROR(cuda::require_aligned("grouped_linear", "scratch", p.scratch, 256));
  // The decode tile's shape, chosen (and its switches checked) before anything is launched, at
  // every call: a bad switch value fails a prefill-width call too.
  DSA_ASSIGN_OR_RETURN(const int row_tiles, decode_row_tiles(p));
  DSA_ASSIGN_OR_RETURN(const int stages, decode_stages(busy_ctas(p, row_tiles)));
  if (p.x_rows == 0 || p.capacity == 0) return ok_status();  // no pair has a row to read
  DSA_ASSIGN_OR_RETURN(const bool prefill, takes_prefill_form(p));
  if (prefill) {
    DSA_ASSIGN_OR_RETURN(const bool ran, launch_prefill(p));
    if (ran) return ok_status();
  }
  const int32_t nkb = blocks_of(p.in_features);
  uint8_t* x8 = static_cast<uint8_t*>(p.scratch);
  float* sx = reinterpret_cast<float*>(x8 + align256(size_t(p.x_rows) * size_t(p.in_features)));
  const int64_t items = int64_t{p.x_rows} * nkb;
  const int64_t qblocks = (items + kQuantWarps - 1) / kQuantWarps;
  if (qblocks > INT32_MAX) {
    return invalid_argument("grouped_linear_cuda: x_rows = " + std::to_string(p.x_rows) +
                            ": too many rows to quantise in one launch");
  }
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(qblocks)), dim3(kQuantWarps * 32),
                                     size_t(0), cuda::current_stream()},
                   quantize_rows_kernel, p.x, p.x_rows, p.in_features, nkb, x8, sx));
  DSA_RETURN_IF_ERROR(cuda::launch_error("grouped_linear_fp8_quantize"));
  switch (tile_pairs(p)) {
    case 8:
      return stages == 4 ? launch_tiles<8, 4>(p, x8, sx, nkb, row_tiles)
                         : launch_tiles<8, kStages>(p, x8, sx, nkb, row_tiles);
    case 16:
      return launch_tiles<16, kStages>(p, x8, sx, nkb, 1);
    case 32:
      return launch_tiles<32, kStages>(p, x8, sx, nkb, 1);
    default:
      return launch_tiles<64, kStages>(p, x8, sx, nkb, 1);
  }
}

}  // namespace dsa::kernels::grouped_fp8
