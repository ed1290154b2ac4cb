// The FP8 linear's token quantiser and few-token wgmma launcher (see linear_fp8_cuda.h).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "dsa/core/env_switch.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/cuda/tensor_map.h"
#include "dsa/kernels/linear/linear_fp8_cuda.h"
#include "dsa/kernels/linear/linear_fp8_wgmma.cuh"
#include "dsa/kernels/linear/token_quant.cuh"

namespace dsa::kernels::linear_fp8 {

namespace {

constexpr size_t kX8Bytes = size_t{32} << 20;       // 32 MiB of quantised tokens per pass
constexpr size_t kPartialBytes = size_t{16} << 20;  // split-K partial sums
constexpr int32_t kMaxTiles = 1 << 16;              // tickets: out <= 4 Mi rows with split-K
constexpr int kQuantWarps = 8;

// Half a warp per (token t, block k): 16 lanes x 8 values (16-byte loads, so enough bytes are
// in flight for a memory-bound pass), quantised by token_quant.cuh.
__global__ void __launch_bounds__(kQuantWarps * 32)
    quantize_tokens_kernel(const bf16* x, int32_t rows, int32_t in, int32_t nkb, uint8_t* x8,
                           float* sx) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t item = (int64_t{blockIdx.x} * kQuantWarps * 32 + threadIdx.x) / 16;
  const int lane = threadIdx.x % 16;
  const bool live = item < int64_t{rows} * nkb;
  const int32_t t = live ? static_cast<int32_t>(item / nkb) : 0;
  const int32_t k = live ? static_cast<int32_t>(item % nkb) : 0;
  const int32_t j0 = k * kLinearBlock, m = live ? min(kLinearBlock, in - j0) : 0;  // m % 16 == 0
  const int c = lane * 8;
  const bool has = c < m;
  const uint4 raw =
      has ? *reinterpret_cast<const uint4*>(x + int64_t{t} * in + j0 + c) : make_uint4(0, 0, 0, 0);
  const Quant8 q = quantize_half_warp8(raw, has);
  if (has) *reinterpret_cast<uint2*>(x8 + int64_t{t} * in + j0 + c) = q.codes;
  if (live && lane == 0) sx[int64_t{k} * rows + t] = q.scale;
}

// Whether split-K fills the GPU with one wave of CTAs (DSA_FP8_SPLITS unset or "wave") or with at
// least one ("fill", the earlier rule, for side-by-side runs). Read per call (host work, only when
// a linear is enqueued), so a test can run both.
StatusOr<bool> splits_fill() {
  DSA_ASSIGN_OR_RETURN(const std::string_view rule,
                       env_choice("DSA_FP8_SPLITS", {"wave", "fill"}, "wave"));
  return rule == "fill";
}

// Split-K: each CTA at least one K block, within the partial-sum scratch and the tickets. The
// wave rule takes the most splits whose grid stays within one wave of `ctas_per_sm` CTAs per SM:
// a grid just past a wave runs its last CTAs alone after the others (o_proj at T = 1: 112 tiles
// x 5 splits = 560 CTAs on 528 slots, each of the last 32 streaming 26 K blocks by itself). The
// fill rule takes the fewest splits that reach a wave.
Status choose_splits(int32_t tiles, int32_t nkb, int n, int sms, int ctas_per_sm,
                     const Scratch& scratch, SmallArgs& a) {
  DSA_ASSIGN_OR_RETURN(const bool fill, splits_fill());
  const int64_t target = int64_t{sms} * ctas_per_sm;
  const int64_t per_wave = fill ? (target + tiles - 1) / tiles : target / tiles;
  int64_t wanted = std::clamp<int64_t>(per_wave, 1, nkb);
  const int64_t per_split_floats = int64_t{tiles} * kTileRows * n;
  wanted = std::min<int64_t>(wanted, int64_t(scratch.partial_floats) / per_split_floats);
  if (tiles > scratch.max_tiles) wanted = 1;
  wanted = std::max<int64_t>(wanted, 1);
  a.kb_per_split = static_cast<int32_t>((nkb + wanted - 1) / wanted);
  a.splits = (nkb + a.kb_per_split - 1) / a.kb_per_split;
  return ok_status();
}

// The few-token kernel's wgmma N for `rows` tokens.
int small_n(int32_t rows) { return rows <= 8 ? 8 : rows <= 16 ? 16 : rows <= 32 ? 32 : 64; }

// The few-token kernel's arguments for p's rows [0, rows), both forms: the pointers and the
// split-K plan (about as many CTAs as the two-kernel form keeps resident).
StatusOr<SmallArgs> small_plan(const LinearParams& p, int32_t rows, const Scratch& scratch) {
  static const StatusOr<int> sm_count = cuda::sm_count();  // host calls: once, not per launch
  DSA_ASSIGN_OR_RETURN(const int sms, sm_count);
  SmallArgs a;
  a.sw = p.weight_scale_inv;
  a.rows = rows;
  a.out = p.out_features;
  a.nkb = (p.in_features + kLinearBlock - 1) / kLinearBlock;
  a.partial = scratch.partial;
  a.tickets = scratch.tickets;
  a.y = p.y;
  a.y_f32 = p.y_f32;
  const int n = small_n(rows);
  const int smem = kStages * (kWeightTileBytes + n * kBlock) + 1024;  // kSmemBytes<n>
  const int32_t tiles = (p.out_features + kTileRows - 1) / kTileRows;
  DSA_RETURN_IF_ERROR(
      choose_splits(tiles, a.nkb, n, sms, std::max(1, (227 * 1024) / (smem + 1024)), scratch, a));
  return a;
}

int fused_max_blocks(int n) {
  return n == 8 ? kFusedMaxBlocks<8> : n == 16 ? kFusedMaxBlocks<16> : kFusedMaxBlocks<32>;
}

template <int N, bool kFused>
Status launch_small(const LinearParams& p, const CUtensorMap& weights, const CUtensorMap& tokens,
                    const SmallArgs& a) {
  if (kFused && a.kb_per_split > kFusedMaxBlocks<N>) {
    return internal_error("linear: fused few-token kernel given more K blocks than its area");
  }
  // The fused form's smem varies with the split: its attribute is set once, to the largest.
  const size_t smem = kFused ? fused_smem_bytes<N>(a.kb_per_split) : size_t{kSmemBytes<N>};
  const size_t smem_limit = kFused ? fused_smem_bytes<N>(kFusedMaxBlocks<N>) : smem;
  using Kernel = decltype(&linear_fp8_small_kernel<N, kFused>);
  constexpr Kernel kernel = &linear_fp8_small_kernel<N, kFused>;
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<kernel>(smem_limit));
  const int32_t tiles = (p.out_features + kTileRows - 1) / kTileRows;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(a.splits));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(grid), dim3(kThreads), smem, cuda::current_stream()},
                   kernel, weights, tokens, a));
  return cuda::launch_error(kFused ? "linear_fp8_small_fused" : "linear_fp8_small");
}

}  // namespace

Scratch scratch_sizes() {
  Scratch s;
  s.x8_bytes = kX8Bytes;
  s.partial_floats = kPartialBytes / sizeof(float);
  s.max_tiles = kMaxTiles;
  return s;
}

StatusOr<Scratch> allocate_scratch() {
  Scratch s = scratch_sizes();
  // One scale per started 128-column block of a token: at most one per 16 codes (in % 16 == 0).
  const size_t sx_bytes = kX8Bytes / 16 * sizeof(float);
  DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&s.x8, kX8Bytes));
  DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&s.sx, sx_bytes));
  DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&s.partial, kPartialBytes));
  DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&s.tickets, size_t{kMaxTiles} * sizeof(uint32_t)));
  // On the stream the kernels will use, finished before any of them runs.
  const cudaStream_t stream = cuda::current_stream();
  DSA_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(s.tickets, 0, size_t{kMaxTiles} * sizeof(uint32_t), stream));
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return s;
}

bool fast_path_supported(const LinearParams& p) {
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return p.weight_fp8 != nullptr && p.in_features % 16 == 0 && aligned16(p.weight_fp8) &&
         aligned16(p.x) && int64_t{p.in_features} * kSmallMaxRows <= int64_t(kX8Bytes);
}

Status quantize_tokens(const bf16* x, int32_t rows, int32_t in, uint8_t* x8, float* sx) {
  if (rows <= 0) return ok_status();
  const int32_t nkb = (in + kLinearBlock - 1) / kLinearBlock;
  const int64_t items = int64_t{rows} * nkb;  // two per warp
  const int64_t blocks = (items + 2 * kQuantWarps - 1) / (2 * kQuantWarps);
  if (blocks > 0x7FFFFFFF) return invalid_argument("linear: too many tokens to quantise");
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kQuantWarps * 32),
                                     size_t(0), cuda::current_stream()},
                   quantize_tokens_kernel, x, rows, in, nkb, x8, sx));
  return cuda::launch_error("linear_fp8_quantize_tokens");
}

Status small_gemm(const LinearParams& p, int32_t rows, const uint8_t* x8, const float* sx,
                  int32_t sx_ld, const Scratch& scratch) {
  if (rows < 1 || rows > kSmallMaxRows) {
    return invalid_argument("linear: small_gemm rows " + std::to_string(rows) + " not in [1, 64]");
  }
  const int n = small_n(rows);
  CUtensorMap weights, tokens;
  DSA_RETURN_IF_ERROR(
      cuda::byte_rows_map(p.weight_fp8, p.out_features, p.in_features, kTileRows, &weights));
  DSA_RETURN_IF_ERROR(cuda::byte_rows_map(x8, rows, p.in_features, n, &tokens));
  DSA_ASSIGN_OR_RETURN(SmallArgs a, small_plan(p, rows, scratch));
  a.sx = sx;
  a.sx_ld = sx_ld;
  switch (n) {
    case 8:
      return launch_small<8, false>(p, weights, tokens, a);
    case 16:
      return launch_small<16, false>(p, weights, tokens, a);
    case 32:
      return launch_small<32, false>(p, weights, tokens, a);
    default:
      return launch_small<64, false>(p, weights, tokens, a);
  }
}

// Read at every call (host work, a few hundred ns, only when a linear is enqueued), so a test can
// run both forms in one process.
bool fused_enabled() {
  const char* env = std::getenv("DSA_FP8_FUSED_QUANT");
  return env == nullptr || std::string_view(env) != "0";
}

std::optional<SmallArgs> fused_plan(const LinearParams& p, int32_t rows, const Scratch& scratch) {
  if (!fused_enabled() || rows < 1 || rows > kFusedMaxRows) return std::nullopt;
  StatusOr<SmallArgs> a = small_plan(p, rows, scratch);
  if (!a.ok() || a->kb_per_split > fused_max_blocks(small_n(rows))) return std::nullopt;
  a->x = p.x;
  a->in = p.in_features;
  return *a;
}

Status fused_small_gemm(const LinearParams& p, const SmallArgs& plan) {
  CUtensorMap weights;
  DSA_RETURN_IF_ERROR(
      cuda::byte_rows_map(p.weight_fp8, p.out_features, p.in_features, kTileRows, &weights));
  switch (small_n(plan.rows)) {
    case 8:
      return launch_small<8, true>(p, weights, weights, plan);
    case 16:
      return launch_small<16, true>(p, weights, weights, plan);
    default:
      return launch_small<32, true>(p, weights, weights, plan);
  }
}

}  // namespace dsa::kernels::linear_fp8
