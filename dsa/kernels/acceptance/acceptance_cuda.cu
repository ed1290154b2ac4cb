// Acceptance of top-1 drafts (SPEC.md §6.2, §6.3) on the GPU, in two launches:
//  1. sample: grid (d + 1, B), one CTA per verify row; CTA (j, b) samples row b (d + 1) + j at
//     position first_position[b] + j with request b's params, using the sampling op's row sampler
//     (kernels/common/sample_row.cuh), and writes y_j into emitted[b, j]. Every row is sampled,
//     also those past the first mismatch: the rows run in parallel, and which are needed is known
//     only after.
//  2. accept: one thread per request counts a (the leading y_j == g_{j+1}, y_j a token) and
//     overwrites emitted[b, a + 1 : d + 1] with -1; emitted[b, 0 : a] already hold g_1..g_a since
//     they equal them.
// At d = 0 (the MTP chain's greedy drafts: one row per request, nothing to count) the sample
// kernel writes accepted[b] = 0 itself and the second launch is skipped: one kernel per draft.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/kernels/common/sample_row.cuh"

namespace dsa::kernels {

namespace {

namespace sd = sampling_device;

constexpr int kAcceptThreads = 128;

// Request b's params are checked by every one of its CTAs (the same verdict); only row 0 reports,
// so the error word names the request once.
__global__ void __launch_bounds__(sd::kThreads)
    acceptance_sample_kernel(AcceptanceParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ sd::Smem sm;
  const int32_t j = static_cast<int32_t>(blockIdx.x), b = static_cast<int32_t>(blockIdx.y);
  const int32_t d = p.drafts_per_request;
  const int64_t row = int64_t{b} * (d + 1) + j;
  if (d == 0 && threadIdx.x == 0) p.accepted[b] = 0;  // no count launch at d = 0 (header)
  const int64_t first = p.first_position[b];
  const bool positions_ok = first >= 0 && first + d <= INT32_MAX;
  const sd::RowParams rp{p.temperature[b], p.top_p[b], p.top_k[b], p.seed[b],
                         positions_ok ? static_cast<int32_t>(first + j) : -1};
  const int32_t bad = sd::row_param_error(rp);  // 4 when the positions leave int32
  if (bad != 0) {                               // block-uniform
    if (threadIdx.x == 0) {
      if (j == 0) {
        cuda::report_device_error(err, StatusCode::kInvalidArgument, cuda::OpId::kAcceptance, b,
                                  bad);
      }
      p.emitted[row] = -1;
    }
    return;
  }
  const int64_t stride = p.row_stride != 0 ? p.row_stride : p.vocab;
  const int32_t y = sd::sample_row(p.logits + row * stride, p.vocab, rp, sm);
  if (threadIdx.x == 0) p.emitted[row] = y;
}

__global__ void acceptance_count_kernel(AcceptanceParams p) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t b = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= p.requests) return;
  const int32_t d = p.drafts_per_request;
  int32_t* out = p.emitted + int64_t{b} * (d + 1);
  const int32_t* g = p.drafts + int64_t{b} * d;
  int32_t a = 0;
  while (a < d && out[a] != -1 && out[a] == g[a]) ++a;
  p.accepted[b] = a;
  for (int32_t j = a + 1; j <= d; ++j) out[j] = -1;
}

}  // namespace

Status accept_drafts_cuda(const AcceptanceParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.requests == 0) return ok_status();
  // grid.y holds B, at most 65535 requests per launch: far above any batch bucket.
  if (p.requests > 65535) {
    return invalid_argument("acceptance: requests = " + std::to_string(p.requests) +
                            ": the CUDA backend takes at most 65535 per call");
  }
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  const dim3 grid(static_cast<unsigned>(p.drafts_per_request + 1),
                  static_cast<unsigned>(p.requests));
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(grid), dim3(sd::kThreads), size_t(0), cuda::current_stream()},
      acceptance_sample_kernel, p, err));
  if (p.drafts_per_request == 0) {
    return cuda::end_launch("acceptance_sample_kernel", checked, "accept_drafts_cuda");
  }
  DSA_RETURN_IF_ERROR(cuda::launch_error("acceptance_sample_kernel"));
  const unsigned blocks = static_cast<unsigned>((p.requests + kAcceptThreads - 1) / kAcceptThreads);
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(blocks), dim3(kAcceptThreads), size_t(0), cuda::current_stream()},
      acceptance_count_kernel, p));
  return cuda::end_launch("acceptance_count_kernel", checked, "accept_drafts_cuda");
}

}  // namespace dsa::kernels
