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
#include "dsa/kernels/layernorm/layernorm.h"

namespace dsa::kernels {

namespace {

// Same tree for every launch of the same shape (deterministic); every thread gets the total.
__device__ double block_sum(double v, double* scratch /* [33] */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double s = lane < warps ? scratch[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) scratch[32] = s;
  }
  __syncthreads();
  return scratch[32];
}

// The correctly rounded bf16 of a double (device twin of bf16_round.h's double_to_bf16): when the
// fp32 rounding lands exactly on a bf16 tie that the double was not on, the double decides.
__device__ bf16 double_to_bf16_rn(double d) {
  const float f = __double2float_rn(d);
  const uint32_t u = float_bits(f);
  if (isfinite(f) && (u & 0xFFFFu) == 0x8000u && static_cast<double>(f) != d) {
    const bool away_from_zero = fabs(d) > fabs(static_cast<double>(f));
    return bf16{static_cast<uint16_t>((u >> 16) + (away_from_zero ? 1u : 0u))};
  }
  return float_to_bf16(f);
}

// One block computes one row t: mean and biased variance of x[t, 0:D] (two passes about the mean),
// then y[t, d] = (x - mu) / sqrt(var + eps) * w[d] + b[d]. Thread i reads and writes only
// elements i, i + blockDim, ..., after both reductions, so y may alias x.
__global__ void layernorm_kernel(const bf16* x, const float* __restrict__ w,
                                 const float* __restrict__ b, bf16* y, int32_t dim,
                                 int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ double scratch[33];
  const int64_t t = blockIdx.x;
  const bf16* xr = x + t * x_stride;
  double sum = 0.0;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) sum += bf16_to_float(xr[d]);
  const double mean = block_sum(sum, scratch) / dim;
  double sum_sq = 0.0;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) {
    const double c = static_cast<double>(bf16_to_float(xr[d])) - mean;
    sum_sq += c * c;
  }
  const double inv_std = 1.0 / sqrt(block_sum(sum_sq, scratch) / dim + static_cast<double>(eps));
  bf16* yr = y + t * y_stride;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) {
    const double c = static_cast<double>(bf16_to_float(xr[d])) - mean;
    yr[d] = double_to_bf16_rn(c * inv_std * static_cast<double>(w[d]) + static_cast<double>(b[d]));
  }
}

}  // namespace

Status layernorm_cuda(const LayerNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t xs = p.x_stride == 0 ? p.dim : p.x_stride;
  const int64_t ys = p.y_stride == 0 ? p.dim : p.y_stride;
  const int threads = p.dim >= 256 ? 256 : ((p.dim + 31) / 32) * 32;
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(p.num_tokens), dim3(threads), size_t(0), cuda::current_stream()},
      layernorm_kernel, p.x, p.weight, p.bias, p.y, p.dim, xs, ys, p.eps));
  return cuda::launch_error("layernorm");
}

}  // namespace dsa::kernels
