// RMSNorm's row code on the device, shared by rmsnorm_cuda (rmsnorm, add_rmsnorm) and the fused
// kernels that normalise rows inside a larger block (attention_prologue): the launch shape, the
// block reduction and the vector row body. One copy of the arithmetic, so a fused norm is
// bit-identical to rmsnorm_cuda's wherever it runs the same shape.
//
// Why a norm may run in a block with more threads than its shape: the row's vectors are owned by
// the shape's `threads` threads exactly as in rmsnorm_cuda, and every other thread of the block
// adds 0.0f to the block sum. Sums of squares are >= +0, and x + (+0) == x for every such x, so the
// warp sums, and the tree over them (whose unused slots are +0 anyway), are the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/launch_checks.h"

namespace dsa::kernels::rmsnorm_dev {

inline constexpr int kVecElems = 8;  // bf16 per 16-byte vector

// Sum over the block, the same tree for every launch of the same shape: xor-shuffles inside each
// warp, then warp 0 adds the warp sums in warp order. Every thread gets the total. Every thread
// of the block must call it (it synchronises the block); threads with nothing to add pass 0.
__device__ inline float block_sum(float v, float* scratch /* [33] */) {
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

__device__ inline float inv_rms(float sum_sq, int32_t dim, float eps) {
  // IEEE division and sqrt (never --use_fast_math): the fp32 error stays far below half a bf16 ulp.
  return 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
}

// rmsnorm's x, read as it is. vec(t, v) is vector v (8 elements) of row t; first(t, d) element d,
// read by the thread that owns it; again(t, d) the same element in the scalar kernel's second
// pass, by the same thread. (rmsnorm_cuda.cu has the other sources: the added and gathered rows.)
struct NormInput {
  const bf16* x;
  int64_t stride;
  __device__ uint4 vec(int64_t t, int32_t v) const {
    return reinterpret_cast<const uint4*>(x + t * stride)[v];
  }
  __device__ bf16 first(int64_t t, int32_t d) const { return x[t * stride + d]; }
  __device__ bf16 again(int64_t t, int32_t d) const { return x[t * stride + d]; }
};

// The block computes one row t: y[t, 0:D] = x[t, 0:D] * inv_rms(x[t]) * w[0:D], with D = 8 * nvec
// and every row start 16-byte aligned. Thread i < `threads` owns vectors i, i + threads, ... (kVec
// of them, kept in registers between the reduction and the write, so y may alias rmsnorm's x);
// threads past `threads` own none but must call too (block_sum). rmsnorm_cuda passes t =
// blockIdx.x and threads = blockDim.x; a fused kernel its own row and the norm's NormShape threads.
template <int kVec, typename Input>
__device__ __forceinline__ void norm_row_vec(const Input& in, const bf16* __restrict__ w, bf16* y,
                                             int32_t nvec, int64_t y_stride, float eps, int64_t t,
                                             int threads) {
  __shared__ float scratch[33];
  const bool owner = threadIdx.x < static_cast<unsigned>(threads);
  const uint4* wr = reinterpret_cast<const uint4*>(w);
  uint4 cache[kVec];
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int v = threadIdx.x + k * threads;
    if (owner && v < nvec) {
      cache[k] = in.vec(t, v);
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
    const int v = threadIdx.x + k * threads;
    if (owner && v < nvec) {
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

// A norm launch, decided from the row layout alone: the path, the block size and (vector path)
// the vectors each thread caches — together they fix the order of the sum of squares.
// add_rmsnorm decides it for the h it leaves (x = h, x_stride = D), exactly as rmsnorm_cuda would
// after residual_add_cuda, which is what makes the fused y bit-identical to the unfused pair's;
// attention_prologue runs its norms in one block per row where this says vec with slot 0.
struct NormShape {
  bool vec = false;  // 16-byte vector kernel; else the scalar kernel
  int threads = 0;
  int slot = 0;  // vector path: kVec = 1, 2, 4, 8 for slot 0..3
};

// copy: a gathered norm's x_copy (stored in vectors on the vector path), or nullptr.
inline NormShape norm_shape(int32_t dim, int64_t xs, int64_t ys, const void* x, const void* y,
                            const void* w, const void* copy = nullptr) {
  const bool vec_ok = dim % kVecElems == 0 && xs % kVecElems == 0 && ys % kVecElems == 0 &&
                      cuda::is_aligned(x, 16) && cuda::is_aligned(y, 16) &&
                      cuda::is_aligned(w, 16) && (copy == nullptr || cuda::is_aligned(copy, 16));
  const int32_t nvec = dim / kVecElems;
  // Up to 256 threads with at most 4 cached vectors each (D <= 8192, every V3.2 norm), then up to
  // 1024 threads with 8 (D <= 65536); wider rows take the scalar path.
  if (vec_ok && nvec <= 1024 * 8) {
    int threads = nvec <= 256 * 4 ? 256 : 1024;
    const int per = (nvec + threads - 1) / threads;
    if (per <= 1) threads = ((nvec + 31) / 32) * 32;
    return {true, threads, per <= 1 ? 0 : per <= 2 ? 1 : per <= 4 ? 2 : 3};
  }
  return {false, dim >= 1024 ? 1024 : ((dim + 31) / 32) * 32, 0};
}

}  // namespace dsa::kernels::rmsnorm_dev
