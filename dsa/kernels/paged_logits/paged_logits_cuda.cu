// Launcher of the paged MQA logits kernel (SPEC.md §3b): validate, describe the pool's key pages
// and the q rows as tensor maps for the bulk copy engine, launch one CTA per schedule consumer on
// the current stream, check the launch, and in checked mode return the device error word's Status.
// The schedule lives in device memory, so its header is checked by the kernel (always) and
// reported through the error word; unchecked launches do not synchronise.
#include <cstdint>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/indexer_tensor_maps.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits/paged_logits_wgmma.cuh"

namespace dsa::kernels {

namespace {
namespace detail = paged_logits_wgmma;

template <int H>
Status launch(const PagedLogitsParams& p, const detail::Args& a, const CUtensorMap& keys,
              const CUtensorMap& q, uint32_t smem_bytes) {
  DSA_RETURN_IF_ERROR(cuda::allow_dynamic_smem_once<detail::paged_logits_wgmma_kernel<H>>(
      detail::kSmemBudget + 1024));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(p.num_consumers), dim3(detail::kThreads),
                                     size_t(smem_bytes), cuda::current_stream()},
                   detail::paged_logits_wgmma_kernel<H>, a, keys, q));
  return ok_status();
}

}  // namespace

Status paged_logits_cuda(const PagedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  // Bulk copies need 16-byte aligned sources (pool pages, q and w rows).
  DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "pool.data", p.pool.data, 16));
  if (p.batch_pad > 0) {
    DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "q", p.q, 16));
    DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "w", p.w, 16));
    DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "logits", p.logits, 4));
  }
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());

  const bool checked = checked_mode();
  const detail::SmemPlan plan = detail::plan_smem(p.rows_per_request, p.num_heads);
  detail::Args a{};
  a.w = p.w;
  a.row_len = p.row_len;
  a.req_slot = p.req_slot;
  a.page_table = p.page_table.data;
  a.pool = p.pool.data;
  a.schedule = p.schedule;
  a.logits = p.logits;
  a.err = err;
  a.ld = p.logits_ld;
  a.table_rows = p.page_table.num_rows;
  a.W = p.page_table.width;
  a.num_pages = p.pool.num_pages;
  a.batch_pad = p.batch_pad;
  a.n = p.rows_per_request;
  a.heads = p.num_heads;
  a.G = p.num_consumers;
  a.checked = checked ? 1 : 0;
  a.stages = plan.stages;
  a.q_slots = plan.q_slots;
  a.q_rows_pad = plan.q_rows_pad;
  a.off_q = plan.off_q;
  a.off_scales = plan.off_scales;
  a.off_w = plan.off_w;
  a.off_items = plan.off_items;
  a.off_bars = plan.off_bars;

  // B_pad = 0 still launches (the header check is always on, §3b), with maps of one q row.
  CUtensorMap keys{}, q{};
  DSA_RETURN_IF_ERROR(indexer_keys_map(p.pool, &keys));
  if (p.batch_pad > 0) {
    DSA_RETURN_IF_ERROR(rows_128b_map(
        p.q, uint64_t(p.batch_pad) * uint64_t(p.rows_per_request) * uint64_t(p.num_heads), &q));
  }
  switch (p.num_heads) {  // validate() admits only 16, 32, 64
    case 16:
      DSA_RETURN_IF_ERROR(launch<16>(p, a, keys, q, plan.bytes));
      break;
    case 32:
      DSA_RETURN_IF_ERROR(launch<32>(p, a, keys, q, plan.bytes));
      break;
    default:
      DSA_RETURN_IF_ERROR(launch<64>(p, a, keys, q, plan.bytes));
      break;
  }
  return cuda::end_launch("paged_logits_wgmma_kernel", checked, "paged_logits_cuda");
}

}  // namespace dsa::kernels
