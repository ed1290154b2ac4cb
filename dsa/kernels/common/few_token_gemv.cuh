// The few-token bf16 GEMM of linear and batched_linear (SPEC.md §8.8's bf16 class): y = x W^T for
// T <= kFewTokensMax tokens per batch, one memory-streaming kernel of our own instead of cuBLASLt.
// At decode shapes these products are matrix-vector products: cuBLASLt spends a few microseconds
// of fixed cost on each and, as a kernel we do not build, breaks the programmatic-dependent-launch
// chain of a forward on both sides (cuda/pdl.h), while this kernel takes part in it.
//
// A CTA of 256 threads owns kRowsPerCta output features of one batch for all T tokens: each thread
// streams 8 consecutive columns of those weight rows per step (one 16-byte load per row: the
// weight is read once, coalesced, not kept in L1) and of each token's x (16 bytes, reused by every
// row; x is small and stays cached), with fp32 dot products in registers; the CTA reduces across
// its threads (warp shuffles, then shared memory) in one fixed order, so results are run-to-run
// deterministic and each output depends only on its own token's x row and the weight.
// Opt-in: DSA_LINEAR_FEW_TOKENS=1 (or =narrow: only unbatched products of at most 256 outputs)
// in the environment. Off by default because in the engine it did
// not pay on the H200 (bench/RESULTS.md, 2026-12-02): its kernel time is about cuBLASLt's (3.35
// against ~3.8 µs per call at the tiny model's shapes), steady-state decode moved by -10..+2%,
// and the first replay of a graph holding it stalled for ~170 ms (cause not established).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"

namespace dsa::kernels::few_token_gemv {

inline constexpr int32_t kFewTokensMax = 8;

// y[b][t][i] = sum_j x[b][t][j] W[b][i][j], with element offsets b * *_bs, t * *_ld, i * in.
struct Args {
  const bf16* x = nullptr;
  const bf16* w = nullptr;
  bf16* y = nullptr;  // exactly one of the two outputs
  float* y_f32 = nullptr;
  int32_t batch = 1, tokens = 0, in = 0, out = 0;
  int64_t x_ld = 0, x_bs = 0, w_bs = 0, y_ld = 0, y_bs = 0;
};

namespace detail {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerCta = 4;
constexpr int kCols = 8;  // per thread and step: one 16-byte load of bf16
constexpr int64_t kColsPerStep = int64_t{kThreads} * kCols;

__device__ __forceinline__ void unpack(const uint4& v, float f[kCols]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = __uint_as_float(w[k] << 16);
    f[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
  }
}

template <int kTokens>
__global__ void __launch_bounds__(kThreads) few_token_gemv_kernel(Args a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t in = a.in, out = a.out, b = blockIdx.y;
  const int64_t row0 = int64_t{blockIdx.x} * kRowsPerCta;
  const int T = a.tokens;
  const bf16* x = a.x + b * a.x_bs;
  const bf16* w = a.w + b * a.w_bs;
  float acc[kRowsPerCta][kTokens] = {};
  for (int64_t c = int64_t{tid} * kCols; c < in; c += kColsPerStep) {
    float xv[kTokens][kCols];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < T) {
        unpack(__ldg(reinterpret_cast<const uint4*>(x + t * a.x_ld + c)), xv[t]);
      } else {
#pragma unroll
        for (int k = 0; k < kCols; ++k) xv[t][k] = 0.f;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerCta; ++r) {
      if (row0 + r >= out) break;
      float wv[kCols];
      unpack(__ldcs(reinterpret_cast<const uint4*>(w + (row0 + r) * in + c)), wv);
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
#pragma unroll
        for (int k = 0; k < kCols; ++k) acc[r][t] = fmaf(xv[t][k], wv[k], acc[r][t]);
      }
    }
  }
  __shared__ float partial[kWarps][kRowsPerCta][kTokens];
#pragma unroll
  for (int r = 0; r < kRowsPerCta; ++r) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, s);
      if (lane == 0) partial[warp][r][t] = v;
    }
  }
  __syncthreads();
  if (tid >= kRowsPerCta * kTokens) return;
  const int r = tid / kTokens, t = tid % kTokens;
  const int64_t i = row0 + r;
  if (i >= out || t >= T) return;
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) sum += partial[k][r][t];
  const int64_t at = b * a.y_bs + t * a.y_ld + i;
  if (a.y != nullptr) {
    a.y[at] = float_to_bf16(sum);
  } else {
    a.y_f32[at] = sum;
  }
}

template <int kTokens>
Status launch(const Args& a) {
  const int64_t ctas = (int64_t{a.out} + kRowsPerCta - 1) / kRowsPerCta;
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(a.batch)),
                        dim3(kThreads), size_t(0), cuda::current_stream()},
      few_token_gemv_kernel<kTokens>, a));
  return cuda::launch_error("few_token_gemv");
}

// The largest output width DSA_LINEAR_FEW_TOKENS=narrow takes: the narrow decode products (the
// indexer's head weights, the MoE router), where cuBLASLt runs split-K and a reduction kernel.
inline constexpr int32_t kNarrowMaxOut = 256;

// DSA_LINEAR_FEW_TOKENS=1: every product it takes; =narrow: the unbatched ones (linear's, not
// batched_linear's per-head products) of at most kNarrowMaxOut outputs; anything else: none. Read
// at every call (a getenv per linear launch: cheap beside the launch), so a test can turn it on
// for its own calls.
inline bool enabled(int32_t batch, int32_t out) {
  const char* v = std::getenv("DSA_LINEAR_FEW_TOKENS");
  if (v == nullptr) return false;
  return std::strcmp(v, "1") == 0 ||
         (std::strcmp(v, "narrow") == 0 && batch == 1 && out <= kNarrowMaxOut);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace detail

// Whether the kernel takes `a`: 1 <= T <= kFewTokensMax, batch <= 65535, 16-byte rows (in, x_ld,
// x_bs and w_bs multiples of 8 elements) at 16-byte aligned x and w, and DSA_LINEAR_FEW_TOKENS
// set for this width (detail::enabled).
inline bool supported(const Args& a) {
  return detail::enabled(a.batch, a.out) && a.tokens >= 1 && a.tokens <= kFewTokensMax &&
         a.batch >= 1 && a.batch <= 65535 && a.in % detail::kCols == 0 &&
         a.x_ld % detail::kCols == 0 && a.x_bs % detail::kCols == 0 &&
         a.w_bs % detail::kCols == 0 && detail::aligned16(a.x) && detail::aligned16(a.w);
}

// Launches it on the current stream (`a` supported()).
inline Status run(const Args& a) {
  if (a.tokens <= 1) return detail::launch<1>(a);
  if (a.tokens <= 2) return detail::launch<2>(a);
  if (a.tokens <= 4) return detail::launch<4>(a);
  return detail::launch<8>(a);
}

}  // namespace dsa::kernels::few_token_gemv
