// Launchers of the sparse MLA CUDA kernels (SPEC.md §3f decode, §3g prefill): validate, pick
// the split count, launch the attention kernel (and the combine when split), then in checked
// mode collect the device error word.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_kernel.cuh"
#include "dsa/kernels/sparse_mla/sparse_mla_wgmma.cuh"

namespace dsa::kernels {

namespace {
using sparse_mla_cuda::MlaKernelArgs;

// The fewest 64-key tiles a split takes. A split costs a fixed part (its Q load, its partial
// state's write and its share of the combine) against the tiles it overlaps. Measured at V3.2's
// decode (H 128, K 2048, FP8-656; bench/RESULTS.md 2026-12-06, kernel + combine): 1 row 21.9 /
// 20.2 / 23.9 µs at 1 / 2 / 4 tiles (32 / 16 / 8 splits); 4 rows 29.1 / 29.2 / 25.7 µs (16 / 16 /
// 8); 8 rows 33.0 at each (8 splits by the SM count). So 2 tiles up to 2 rows, 4 above.
// DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT = 1..32 forces one value, for side-by-side runs. Read once
// per process, so a graph and its eager forwards agree; a bad value fails every decode launch
// with its message.
StatusOr<int64_t> parse_min_tiles_per_split() {
  const char* env = std::getenv("DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT");
  if (env == nullptr) return 0;  // by rows
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || v < 1 || v > 32)
    return invalid_argument(std::string("DSA_SPARSE_MLA_MIN_TILES_PER_SPLIT = ") + env +
                            ": must be an integer in [1, 32] (or unset: chosen by rows)");
  return int64_t{v};
}
StatusOr<int64_t> min_tiles_per_split(int32_t rows) {
  static const StatusOr<int64_t> forced = parse_min_tiles_per_split();
  DSA_ASSIGN_OR_RETURN(const int64_t v, forced);
  if (v > 0) return v;
  return rows <= 2 ? 2 : 4;
}

// Splits for decode: as many as fill one wave of CTAs (one CTA per SM: the kernel takes 227 KB of
// shared memory), at most one per min_tiles_per_split() 64-key tiles, and no more than the
// workspace holds.
StatusOr<int32_t> choose_splits(const SparseMlaDecodeParams& p) {
  if (p.num_splits != 0) return p.num_splits;
  if (p.split_workspace == nullptr) return 1;
  DSA_ASSIGN_OR_RETURN(int sms, cuda::sm_count());
  DSA_ASSIGN_OR_RETURN(const int64_t min_tiles, min_tiles_per_split(p.rows));
  const int64_t ctas = int64_t{p.rows} * ((p.num_heads + 63) / 64);
  if (ctas >= sms) return 1;
  int64_t splits = std::min<int64_t>(sms / ctas, p.topk / sparse_mla_cuda::kTileKeys / min_tiles);
  const int64_t per_split = sparse_mla_decode_workspace_floats(p.rows, p.num_heads, 1);
  splits = std::min(splits, p.split_workspace_floats / std::max<int64_t>(per_split, 1));
  return static_cast<int32_t>(std::clamp<int64_t>(splits, 1, kMaxSparseMlaSplits));
}

// The attention kernel, then (split) the combine; in checked mode (the kernels were given the error
// word) the word is collected, synchronously, after the last launch.
template <LatentFormat kFormat>
Status launch(const MlaKernelArgs& args, std::string_view op) {
  constexpr auto kernel = sparse_mla_cuda::sparse_mla_wgmma_kernel<kFormat>;
  constexpr int kSmem = sparse_mla_cuda::wg::kSmemBytes;
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<kernel>(kSmem));
  const bool checked = args.err != nullptr;
  const int64_t head_blocks =
      (args.heads + sparse_mla_cuda::kHeadsPerCta - 1) / sparse_mla_cuda::kHeadsPerCta;
  const dim3 grid(static_cast<uint32_t>(int64_t{args.rows} * head_blocks), 1,
                  static_cast<uint32_t>(args.num_splits));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(grid), dim3(sparse_mla_cuda::wg::kThreads), size_t(kSmem),
                                     cuda::current_stream()},
                   kernel, args));
  if (args.num_splits <= 1) return cuda::end_launch("sparse_mla_wgmma_kernel", checked, op);
  DSA_RETURN_IF_ERROR(cuda::launch_error("sparse_mla_wgmma_kernel"));
  const int64_t blocks = int64_t{args.rows} * args.heads;
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<uint32_t>(blocks)), dim3(128), size_t(0),
                                     cuda::current_stream()},
                   sparse_mla_cuda::sparse_mla_combine_kernel, args));
  return cuda::end_launch("sparse_mla_combine_kernel", checked, op);
}
}  // namespace

Status sparse_mla_decode_cuda(const SparseMlaDecodeParams& p) {
  constexpr std::string_view kOp = "sparse_mla_decode_cuda";
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.rows == 0) return ok_status();
  // cp.async moves 16-byte chunks: every base pointer must be 16-byte aligned.
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "q", p.q, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "cache.data", p.cache.data, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "split_workspace", p.split_workspace, 16));
  // The kernels store out in 4- and 8-byte words (bf16 pairs, the combine's quads).
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "out", p.out, 8));
  DSA_ASSIGN_OR_RETURN(const int32_t splits, choose_splits(p));
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked_mode()));

  MlaKernelArgs args{};
  args.q = p.q, args.kv = p.cache.data, args.indices = p.indices, args.topk_len = p.topk_len;
  args.rows = p.rows, args.heads = p.num_heads, args.topk = p.topk;
  args.lo = p.cache.page_size, args.hi = p.cache.num_pages * p.cache.page_size;
  args.scale_log2 = static_cast<float>(double{p.sm_scale} * M_LOG2E);
  args.out = p.out, args.lse = p.lse, args.max_logit = nullptr;
  args.num_splits = splits, args.err = err;
  if (splits > 1) {
    args.part_o = p.split_workspace;
    args.part_ml = p.split_workspace + int64_t{splits} * p.rows * p.num_heads * kVDim;
  }
  if (p.cache.format == LatentFormat::kBf16) return launch<LatentFormat::kBf16>(args, kOp);
  return launch<LatentFormat::kFp8_656>(args, kOp);
}

Status sparse_mla_prefill_cuda(const SparseMlaPrefillParams& p) {
  constexpr std::string_view kOp = "sparse_mla_prefill_cuda";
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "q", p.q, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "kv", p.kv, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "out", p.out, 8));
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked_mode()));

  MlaKernelArgs args{};
  args.q = p.q, args.kv = reinterpret_cast<const uint8_t*>(p.kv);
  args.indices = p.indices, args.topk_len = p.topk_len;
  args.rows = p.tokens, args.heads = p.num_heads, args.topk = p.topk;
  args.lo = p.kv_source == SparseMlaKvSource::kFlatPool ? kPageSize : 0;
  args.hi = p.num_kv;
  args.scale_log2 = static_cast<float>(double{p.sm_scale} * M_LOG2E);
  args.out = p.out, args.lse = p.lse, args.max_logit = p.max_logit;
  args.num_splits = 1, args.err = err;
  return launch<LatentFormat::kBf16>(args, kOp);
}

}  // namespace dsa::kernels
