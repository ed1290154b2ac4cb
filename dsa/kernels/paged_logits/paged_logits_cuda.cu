// Launcher of the paged MQA logits kernel (SPEC.md §3b): validate, launch one block per schedule
// consumer on the current stream, check the launch, and in checked mode return the device error
// word's Status. The schedule lives in device memory, so its header is checked by the kernel
// (always) and reported through the error word; unchecked launches do not synchronise.
#include <cstdint>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits/paged_logits_kernel.cuh"

namespace dsa::kernels {

namespace {
namespace detail = paged_logits_detail;
}  // namespace

Status paged_logits_cuda(const PagedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  // 16-byte cp.async sources (pool pages, q and w rows) and float2 logit stores.
  DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "pool.data", p.pool.data, 16));
  if (p.batch_pad > 0) {
    DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "q", p.q, 16));
    DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "w", p.w, 16));
    DSA_RETURN_IF_ERROR(cuda::require_aligned("paged_logits_cuda", "logits", p.logits, 8));
  }
  DSA_RETURN_IF_ERROR(
      cuda::allow_dynamic_smem_once<detail::paged_logits_kernel>(detail::kSmemBytes));
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());

  const bool checked = checked_mode();
  detail::Args a{};
  a.q = p.q;
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

  // One block per consumer, even at B_pad = 0: the header check is always on (§3b).
  detail::paged_logits_kernel<<<p.num_consumers, mqa_mma::kThreads, detail::kSmemBytes,
                                cuda::current_stream()>>>(a);
  return cuda::end_launch("paged_logits_kernel", checked, "paged_logits_cuda");
}

}  // namespace dsa::kernels
