// Launcher of the ragged MQA logits kernel (SPEC.md §3d): validate, one block per 256 / H_i query
// rows on the current stream, check the launch, and in checked mode return the device error
// word's Status (ks / ke out of contract: OutOfRange). Unchecked launches do not synchronise.
#include <cstdint>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"
#include "dsa/kernels/ragged_logits/ragged_logits_kernel.cuh"

namespace dsa::kernels {

namespace {
namespace detail = ragged_logits_detail;
}  // namespace

Status ragged_logits_cuda(const RaggedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  // 16-byte cp.async sources (q, w and key rows); scales are copied per element.
  DSA_RETURN_IF_ERROR(cuda::require_aligned("ragged_logits_cuda", "q", p.q, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned("ragged_logits_cuda", "w", p.w, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned("ragged_logits_cuda", "k8", p.k8, 16));
  DSA_RETURN_IF_ERROR(cuda::require_aligned("ragged_logits_cuda", "kscale", p.kscale, 4));
  DSA_RETURN_IF_ERROR(
      cuda::allow_dynamic_smem_once<detail::ragged_logits_kernel>(detail::kSmemBytes));
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());

  const bool checked = checked_mode();
  detail::Args a{};
  a.q = p.q;
  a.w = p.w;
  a.k8 = p.k8;
  a.kscale = p.kscale;
  a.ks = p.ks;
  a.ke = p.ke;
  a.logits = p.logits;
  a.err = err;
  a.ld = p.logits_ld;
  a.T = p.num_tokens;
  a.S = p.num_keys;
  a.heads = p.num_heads;
  a.rows_per_block = mqa_mma::kMaxQRows / p.num_heads;
  a.checked = checked ? 1 : 0;

  const int64_t blocks = (int64_t{p.num_tokens} + a.rows_per_block - 1) / a.rows_per_block;
  detail::ragged_logits_kernel<<<static_cast<unsigned>(blocks), mqa_mma::kThreads,
                                 detail::kSmemBytes, cuda::current_stream()>>>(a);
  return cuda::end_launch("ragged_logits_kernel", checked, "ragged_logits_cuda");
}

}  // namespace dsa::kernels
