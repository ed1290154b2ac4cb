// MoE combine on the GPU (SPEC.md §8.6): elementwise over [T, D], fp32 arithmetic through the _rn
// intrinsics so nvcc cannot contract a multiply and an add into an FMA the CPU reference (built
// without contraction) does not perform.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/grid_stride.h"
#include "dsa/kernels/moe_dispatch/moe_combine.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;

// One thread per output element (r, t): the fp32 sum over the row's selected experts in order,
// then the shared expert, rounded once.
__global__ void moe_combine_kernel(MoeCombineParams p) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t total = int64_t{p.num_tokens} * p.dim;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t D = p.dim, k = p.top_k;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t r = i / D, t = i % D;
    float acc = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      if (p.expert_ids[r * k + j] < 0) continue;
      const float y = bf16_to_float(p.routed[(r * k + j) * D + t]);
      acc = __fadd_rn(acc, __fmul_rn(p.weights[r * k + j], y));
    }
    if (p.shared) acc = __fadd_rn(acc, bf16_to_float(p.shared[i]));
    p.y[i] = float_to_bf16(acc);
  }
}

}  // namespace

Status moe_combine_cuda(const MoeCombineParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t total = int64_t{p.num_tokens} * p.dim;
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(grid_stride_blocks(total, kThreads)), dim3(kThreads),
                                     size_t(0), cuda::current_stream()},
                   moe_combine_kernel, p));
  return cuda::launch_error("moe_combine");
}

}  // namespace dsa::kernels
