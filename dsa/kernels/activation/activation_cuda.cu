// SwiGLU on the GPU (SPEC.md §8.6): elementwise, fp32 arithmetic through the _rn intrinsics so
// nvcc cannot contract the multiply and the add into an FMA the CPU reference (built without
// contraction) does not perform.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/activation/activation.h"
#include "dsa/kernels/common/grid_stride.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;

// Each thread handles elements i, i + stride, ...: act = bf16(g / (1 + exp(-g)) * u). exp is taken
// in fp64 and rounded once to fp32, which is what a correctly rounded expf returns.
__global__ void swiglu_kernel(const bf16* gate, const bf16* up, bf16* out, int64_t n) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = bf16_to_float(gate[i]);
    const float e = static_cast<float>(exp(-static_cast<double>(g)));
    const float s = __fdiv_rn(g, __fadd_rn(1.0f, e));
    out[i] = float_to_bf16(__fmul_rn(s, bf16_to_float(up[i])));
  }
}

}  // namespace

Status swiglu_cuda(const SwigluParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.n == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(grid_stride_blocks(p.n, kThreads)), dim3(kThreads),
                                     size_t(0), cuda::current_stream()},
                   swiglu_kernel, p.gate, p.up, p.out, p.n));
  return cuda::launch_error("swiglu");
}

}  // namespace dsa::kernels
