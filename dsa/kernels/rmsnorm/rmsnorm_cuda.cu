// RMSNorm and the residual add on the GPU (SPEC.md §8.3, §8.6).
//   rmsnorm:      one block per row; the row is read once into registers (16-byte vectors when
//                 the row layout allows it), sum of squares in fp32 with a fixed reduction tree
//                 (deterministic), then y = x * inv_rms * w in fp32, rounded once to bf16.
//   residual_add: elementwise h = bf16(float(h) + float(x)), one fp32 add (no contraction is
//                 possible: there is no product), one RNE rounding: bit-identical to the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"

namespace dsa::kernels {

namespace {

constexpr int kVecElems = 8;  // bf16 per 16-byte vector

// Sum over the block, the same tree for every launch of the same shape: xor-shuffles inside each
// warp, then warp 0 adds the warp sums in warp order. Every thread gets the total.
__device__ float block_sum(float v, float* scratch /* [32] */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < warps ? scratch[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) scratch[32] = s;
  }
  __syncthreads();
  return scratch[32];
}

__device__ float inv_rms(float sum_sq, int32_t dim, float eps) {
  // IEEE division and sqrt (never --use_fast_math): the fp32 error stays far below half a bf16 ulp.
  return 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
}

// One block computes one row t: y[t, 0:D] = x[t, 0:D] * inv_rms(x[t]) * w[0:D], with D = 8 * nvec
// and every row start 16-byte aligned. Thread i owns vectors i, i + blockDim, ... (kVec of them,
// kept in registers between the reduction and the write, so y may alias x).
template <int kVec>
__global__ void __launch_bounds__(1024)
    rmsnorm_vec_kernel(const bf16* x, const bf16* __restrict__ w, bf16* y, int32_t nvec,
                       int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(x + t * x_stride);
  const uint4* wr = reinterpret_cast<const uint4*>(w);
  uint4 cache[kVec];
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int v = threadIdx.x + k * blockDim.x;
    if (v < nvec) {
      cache[k] = xr[v];
      const bf16* e = reinterpret_cast<const bf16*>(&cache[k]);
#pragma unroll
      for (int j = 0; j < kVecElems; ++j) {
        const float f = bf16_to_float(e[j]);
        sum_sq = fmaf(f, f, sum_sq);
      }
    }
  }
  const float r = inv_rms(block_sum(sum_sq, scratch), nvec * kVecElems, eps);
  uint4* yr = reinterpret_cast<uint4*>(y + t * y_stride);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int v = threadIdx.x + k * blockDim.x;
    if (v < nvec) {
      const uint4 wv = wr[v];
      const bf16* e = reinterpret_cast<const bf16*>(&cache[k]);
      const bf16* we = reinterpret_cast<const bf16*>(&wv);
      uint4 out;
      bf16* oe = reinterpret_cast<bf16*>(&out);
#pragma unroll
      for (int j = 0; j < kVecElems; ++j)
        oe[j] = float_to_bf16(bf16_to_float(e[j]) * r * bf16_to_float(we[j]));
      yr[v] = out;
    }
  }
}

// Any layout (odd D, unaligned strides or pointers): one block per row, scalar loads, two passes.
// Thread i reads and writes only elements i, i + blockDim, ..., so y may alias x.
__global__ void __launch_bounds__(1024)
    rmsnorm_scalar_kernel(const bf16* x, const bf16* __restrict__ w, bf16* y, int32_t dim,
                          int64_t x_stride, int64_t y_stride, float eps) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x;
  const bf16* xr = x + t * x_stride;
  float sum_sq = 0.f;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x) {
    const float f = bf16_to_float(xr[d]);
    sum_sq = fmaf(f, f, sum_sq);
  }
  const float r = inv_rms(block_sum(sum_sq, scratch), dim, eps);
  bf16* yr = y + t * y_stride;
  for (int32_t d = threadIdx.x; d < dim; d += blockDim.x)
    yr[d] = float_to_bf16(bf16_to_float(xr[d]) * r * bf16_to_float(w[d]));
}

// h[i] = bf16(float(h[i]) + float(x[i])) for i in [0, n); 8 elements per thread per step when
// `vec` (n % 8 == 0 and both pointers 16-byte aligned).
__global__ void residual_add_kernel(bf16* h, const bf16* __restrict__ x, int64_t n, bool vec) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (vec) {
    uint4* hv = reinterpret_cast<uint4*>(h);
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (int64_t i = first; i < n / kVecElems; i += stride) {
      uint4 a = hv[i];
      const uint4 b = xv[i];
      bf16* ae = reinterpret_cast<bf16*>(&a);
      const bf16* be = reinterpret_cast<const bf16*>(&b);
#pragma unroll
      for (int j = 0; j < kVecElems; ++j)
        ae[j] = float_to_bf16(__fadd_rn(bf16_to_float(ae[j]), bf16_to_float(be[j])));
      hv[i] = a;
    }
    return;
  }
  for (int64_t i = first; i < n; i += stride)
    h[i] = float_to_bf16(__fadd_rn(bf16_to_float(h[i]), bf16_to_float(x[i])));
}

template <int kVec>
Status launch_vec(const RmsNormParams& p, int threads, int32_t nvec, int64_t xs, int64_t ys) {
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(p.num_tokens), dim3(threads), size_t(0), cuda::current_stream()},
      rmsnorm_vec_kernel<kVec>, p.x, p.weight, p.y, nvec, xs, ys, p.eps));
  return ok_status();
}

}  // namespace

Status rmsnorm_cuda(const RmsNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t xs = p.x_stride == 0 ? p.dim : p.x_stride;
  const int64_t ys = p.y_stride == 0 ? p.dim : p.y_stride;
  const bool vec_ok = p.dim % kVecElems == 0 && xs % kVecElems == 0 && ys % kVecElems == 0 &&
                      cuda::is_aligned(p.x, 16) && cuda::is_aligned(p.y, 16) &&
                      cuda::is_aligned(p.weight, 16);
  const int32_t nvec = p.dim / kVecElems;
  // Up to 256 threads with at most 4 cached vectors each (D <= 8192, every V3.2 norm), then up to
  // 1024 threads with 8 (D <= 65536); wider rows take the scalar path.
  if (vec_ok && nvec <= 1024 * 8) {
    int threads = nvec <= 256 * 4 ? 256 : 1024;
    int per = (nvec + threads - 1) / threads;
    if (per <= 1) threads = ((nvec + 31) / 32) * 32;
    switch (per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : 8) {
      case 1:
        DSA_RETURN_IF_ERROR(launch_vec<1>(p, threads, nvec, xs, ys));
        break;
      case 2:
        DSA_RETURN_IF_ERROR(launch_vec<2>(p, threads, nvec, xs, ys));
        break;
      case 4:
        DSA_RETURN_IF_ERROR(launch_vec<4>(p, threads, nvec, xs, ys));
        break;
      default:
        DSA_RETURN_IF_ERROR(launch_vec<8>(p, threads, nvec, xs, ys));
        break;
    }
  } else {
    const int threads = p.dim >= 1024 ? 1024 : ((p.dim + 31) / 32) * 32;
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(p.num_tokens), dim3(threads), size_t(0), cuda::current_stream()},
        rmsnorm_scalar_kernel, p.x, p.weight, p.y, p.dim, xs, ys, p.eps));
  }
  return cuda::launch_error("rmsnorm");
}

Status residual_add_cuda(const ResidualAddParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  const int64_t n = int64_t{p.num_tokens} * p.dim;
  const bool vec = n % kVecElems == 0 && cuda::is_aligned(p.h, 16) && cuda::is_aligned(p.x, 16);
  const int64_t work = vec ? n / kVecElems : n;
  constexpr int kThreads = 256;
  // Grid-stride loop: at most 132 SMs x 16 blocks of 256 threads in flight.
  const int64_t blocks = std::min<int64_t>((work + kThreads - 1) / kThreads, 132 * 16);
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), size_t(0),
                                     cuda::current_stream()},
                   residual_add_kernel, p.h, p.x, n, vec));
  return cuda::launch_error("residual_add");
}

}  // namespace dsa::kernels
