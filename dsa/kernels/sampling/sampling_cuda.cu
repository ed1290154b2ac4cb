// Token sampling (SPEC.md §6.2, §6.3) on the GPU: one CTA per row, each running
// sampling_device::sample_row (kernels/common/sample_row.cuh: the rules, the top-k / top-p
// selection for any V, and why it draws the reference's tokens).
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/sample_row.cuh"
#include "dsa/kernels/sampling/sampling.h"

namespace dsa::kernels {

namespace {

namespace sd = sampling_device;

// One CTA samples row r: logits[r, 0:V] and the row's params -> out[r]. A row whose params fail
// the reference's checks gets -1 and reports (row r, value 1..4) into `err` when it is non-null.
__global__ void __launch_bounds__(sd::kThreads)
    sampling_kernel(SamplingOpParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ sd::Smem sm;
  const int32_t r = static_cast<int32_t>(blockIdx.x);
  const sd::RowParams rp{p.temperature[r], p.top_p[r], p.top_k[r], p.seed[r], p.position[r]};
  if (const int32_t bad = sd::row_param_error(rp); bad != 0) {  // block-uniform
    if (threadIdx.x == 0) {
      cuda::report_device_error(err, StatusCode::kInvalidArgument, cuda::OpId::kModelOp, r, bad);
      p.out[r] = -1;
    }
    return;
  }
  const int32_t y = sd::sample_row(p.logits + int64_t{r} * p.vocab, p.vocab, rp, sm);
  if (threadIdx.x == 0) p.out[r] = y;
}

}  // namespace

Status sample_rows_cuda(const SamplingOpParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.rows == 0) return ok_status();
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(p.rows)), dim3(sd::kThreads),
                                     size_t(0), cuda::current_stream()},
                   sampling_kernel, p, err));
  return cuda::end_launch("sampling_kernel", checked, "sample_rows_cuda");
}

}  // namespace dsa::kernels
