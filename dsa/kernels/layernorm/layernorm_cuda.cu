// LayerNorm with bias on the GPU (SPEC.md §8.3; the indexer's k_norm, D = 128).
//
// The statistics and the affine map run in fp64, not fp32: y = z * w + b can cancel (b close to
// -z * w), and an fp32 z carries ~2^-23 relative error, which near such a cancellation is many
// bf16 ulps of y. In fp64 the result is the correctly rounded value up to the last-bit tie-breaks
// (the same rule as the CPU reference's double_to_bf16). The op is tiny (T x 128 in V3.2), so the
// fp64 rate does not matter.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/layernorm_row.cuh"
#include "dsa/kernels/layernorm/layernorm.h"

namespace dsa::kernels {

namespace {

using layernorm_dev::layernorm_row;
using layernorm_dev::layernorm_threads;

// One block computes one row t (layernorm_row.cuh): mean and biased variance of x[t, 0:D], then
// y[t, d] = (x - mu) / sqrt(var + eps) * w[d] + b[d]; y may alias x.
__global__ void layernorm_kernel(const bf16* x, const float* __restrict__ w,
                                 const float* __restrict__ b, bf16* y, int32_t dim,
                                 int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ double scratch[33];
  const int64_t t = blockIdx.x;
  layernorm_row(x + t * x_stride, w, b, y + t * y_stride, dim, eps, blockDim.x, scratch);
}

}  // namespace

Status layernorm_cuda(const LayerNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t xs = p.x_stride == 0 ? p.dim : p.x_stride;
  const int64_t ys = p.y_stride == 0 ? p.dim : p.y_stride;
  const int threads = layernorm_threads(p.dim);
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(p.num_tokens), dim3(threads), size_t(0), cuda::current_stream()},
      layernorm_kernel, p.x, p.weight, p.bias, p.y, p.dim, xs, ys, p.eps));
  return cuda::launch_error("layernorm");
}

}  // namespace dsa::kernels
