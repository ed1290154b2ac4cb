// Launcher of the ragged MQA logits kernel (SPEC.md §3d): validate, describe the gathered keys,
// their scales and the q rows as tensor maps for the bulk copy engine, launch one CTA per
// 256 / H_i query rows (times the key-range slices that fill the SMs) on the current stream, check
// the launch, and in checked mode return the device error word's Status (ks / ke out of contract:
// OutOfRange). Unchecked launches do not synchronise.
#include <algorithm>
#include <cstdint>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/cuda/tensor_map.h"
#include "dsa/kernels/common/indexer_tensor_maps.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"
#include "dsa/kernels/ragged_logits/ragged_logits_launch.h"
#include "dsa/kernels/ragged_logits/ragged_logits_wgmma.cuh"

namespace dsa::kernels {

namespace {
namespace detail = ragged_logits_wgmma;
constexpr const char* kOp = "ragged_logits_cuda";

// The key scales as S * 4 bytes: one box = 64 scales.
Status scales_map(const RaggedLogitsParams& p, CUtensorMap* out) {
  cuda::ByteTensorMap m;
  m.base = p.kscale;
  m.rank = 1;
  m.dims = {uint64_t(p.num_keys) * 4};
  m.box = {detail::kScaleTileBytes};
  m.swizzle_128b = false;
  return cuda::encode_tensor_map(m, out);
}

template <int H>
Status launch(dim3 grid, const detail::Args& a, const CUtensorMap& keys, const CUtensorMap& scales,
              const CUtensorMap& q, uint32_t smem_bytes) {
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<detail::ragged_logits_wgmma_kernel<H>>(
      detail::kSmemBudget + 1024));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(grid), dim3(detail::kThreads), size_t(smem_bytes),
                                     cuda::current_stream()},
                   detail::ragged_logits_wgmma_kernel<H>, a, keys, scales, q));
  return ok_status();
}

}  // namespace

RaggedLogitsGrid ragged_logits_grid(int32_t num_tokens, int32_t num_keys, int32_t num_heads,
                                    int32_t sm_count) {
  RaggedLogitsGrid g;
  const int32_t rows = detail::kColumns / num_heads;
  g.row_groups = (num_tokens + rows - 1) / rows;
  // Slices of the key range while row groups alone leave SMs idle, each at least 2048 keys
  // (eight ring stages: enough to amortise the q load and the pipeline fill).
  const int32_t max_slices = std::max(1, num_keys / 2048);
  const int32_t want = g.row_groups >= sm_count ? 1 : sm_count / std::max(1, g.row_groups);
  g.slices = std::clamp(want, 1, std::min(max_slices, 65535));
  return g;
}

Status ragged_logits_cuda(const RaggedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  // The copy engine's coordinates are int32: q rows T H and scale bytes 4 S must fit.
  if (int64_t{p.num_tokens} * p.num_heads > INT32_MAX) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(kOp) + ": num_tokens = " + std::to_string(p.num_tokens) +
                      ": times num_heads must be < 2^31");
  }
  if (int64_t{p.num_keys} * 4 > INT32_MAX) {
    return Status(
        StatusCode::kInvalidArgument,
        std::string(kOp) + ": num_keys = " + std::to_string(p.num_keys) + ": must be < 2^29");
  }
  // Bulk copies need 16-byte aligned sources (q, w, key rows and the scale array).
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "q", p.q, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "w", p.w, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "k8", p.k8, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "kscale", p.kscale, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned(kOp, "logits", p.logits, 4));
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());
  DSA_ASSIGN_OR_RETURN(int32_t sms, cuda::sm_count());

  const bool checked = checked_mode();
  const detail::SmemPlan plan = detail::plan_smem();
  detail::Args a{};
  a.w = p.w;
  a.ks = p.ks;
  a.ke = p.ke;
  a.logits = p.logits;
  a.err = err;
  a.ld = p.logits_ld;
  a.T = p.num_tokens;
  a.S = p.num_keys;
  a.checked = checked ? 1 : 0;
  a.stages = plan.stages;
  a.off_q = plan.off_q;
  a.off_scales = plan.off_scales;
  a.off_w = plan.off_w;
  a.off_items = plan.off_items;
  a.off_bars = plan.off_bars;

  CUtensorMap keys{}, scales{}, q{};
  if (p.num_keys > 0) {  // no keys: every row is empty and the kernel only checks the ranges
    DSA_RETURN_IF_ERROR(rows_128b_map(p.k8, uint64_t(p.num_keys), &keys));
    DSA_RETURN_IF_ERROR(scales_map(p, &scales));
  }
  DSA_RETURN_IF_ERROR(rows_128b_map(p.q, uint64_t(p.num_tokens) * uint64_t(p.num_heads), &q));
  const RaggedLogitsGrid g = ragged_logits_grid(p.num_tokens, p.num_keys, p.num_heads, sms);
  const dim3 grid(static_cast<unsigned>(g.row_groups), static_cast<unsigned>(g.slices));
  switch (p.num_heads) {  // validate() admits only 16, 32, 64
    case 16:
      DSA_RETURN_IF_ERROR(launch<16>(grid, a, keys, scales, q, plan.bytes));
      break;
    case 32:
      DSA_RETURN_IF_ERROR(launch<32>(grid, a, keys, scales, q, plan.bytes));
      break;
    default:
      DSA_RETURN_IF_ERROR(launch<64>(grid, a, keys, scales, q, plan.bytes));
      break;
  }
  return cuda::end_launch("ragged_logits_wgmma_kernel", checked, kOp);
}

}  // namespace dsa::kernels
