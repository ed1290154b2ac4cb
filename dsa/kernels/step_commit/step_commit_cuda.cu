// The step commit on the GPU (step_commit.h): one thread per request runs the DSA_HD
// commit_request and gather_request_tokens that the CPU reference runs, so the two write the same
// bytes (inv. 16).
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/step_commit/step_commit.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    step_commit_kernel(StepCommitParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t b = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (b >= p.requests) return;
  int32_t value = 0;
  const StepCommitError e = commit_request(p, static_cast<int32_t>(b), &value);
  gather_request_tokens(p, static_cast<int32_t>(b));
  if (e != StepCommitError::kNone) {
    cuda::report_device_error(err,
                              e == StepCommitError::kAccepted || e == StepCommitError::kShift
                                  ? StatusCode::kInvalidArgument
                                  : StatusCode::kFailedPrecondition,
                              cuda::OpId::kStepCommit, static_cast<int32_t>(b), value);
  }
}

}  // namespace

Status step_commit_cuda(const StepCommitParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.requests == 0) return ok_status();
  // Always reported (a safety check); read at the owner's next take of the word.
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());
  const unsigned blocks = static_cast<unsigned>((p.requests + kThreads - 1) / kThreads);
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(blocks), dim3(kThreads), size_t(0), cuda::current_stream()},
      step_commit_kernel, p, err));
  return cuda::end_launch("step_commit_kernel", checked_mode(), "step_commit_cuda");
}

}  // namespace dsa::kernels
