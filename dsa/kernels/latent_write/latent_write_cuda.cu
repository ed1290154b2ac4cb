// CUDA MLA latent cache write (SPEC.md §4.7, formats §2.3 / §2.4). bf16 pools: a 1152-byte copy
// per token. FP8-656 pools: c quantised per 128-value tile with the power-of-two rule (§2.1), then
// the 4 scales and k_pe verbatim. Class E: the quantiser steps are the DSA_HD functions of
// dsa/core that the CPU reference runs, and each tile's amax is an exact max.
#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/latent_write/latent_write.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kTokensPerBlock = kThreads / 32;      // one warp per token
constexpr int kRowVectors = kBf16LatentBytes / 16;  // 72 uint4 per 576-bf16 row
constexpr unsigned kFullMask = 0xFFFFFFFFu;

__device__ __forceinline__ bool bf16_bits_finite(uint32_t h) { return (h & 0x7F80u) != 0x7F80u; }

// First non-finite bf16 of a 16-byte vector (its bit pattern), or 0 when all 8 are finite.
__device__ __forceinline__ uint32_t first_non_finite(uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t bad = 0;
#pragma unroll
  for (int i = 7; i >= 0; --i) {
    const uint32_t h = (i % 2 == 0) ? (w[i / 2] & 0xFFFFu) : (w[i / 2] >> 16);
    if (!bf16_bits_finite(h)) bad = h;
  }
  return bad;
}

// Checked mode: if any lane saw a non-finite value, the lowest such lane reports it and the
// whole warp (one token) returns true.
__device__ __forceinline__ bool report_non_finite(uint32_t bad_bits, int32_t t,
                                                  cuda::DeviceErrorWord* error) {
  const unsigned ballot = __ballot_sync(kFullMask, bad_bits != 0);
  if (ballot == 0) return false;
  if ((threadIdx.x % 32) == unsigned(__ffs(ballot) - 1)) {
    cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kLatentWrite, t,
                              static_cast<int32_t>(bad_bits));
  }
  return true;
}

// The per-value steps of quantize_block_pow2 (fp8_quant.h) on 8 bf16 values packed in a uint4,
// given the tile's exponent; returns the 8 e4m3 codes little-endian in a uint2.
__device__ __forceinline__ uint2 quantize8(uint4 v, int32_t e) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  const float inv = pow2_float(-e);
  uint32_t codes[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float x = bits_float(i % 2 == 0 ? w[i / 2] << 16 : w[i / 2] & 0xFFFF0000u);
    float y = x * inv;  // exact: multiplication by a power of two
    y = y > kE4m3Max ? kE4m3Max : (y < -kE4m3Max ? -kE4m3Max : y);
    codes[i / 4] |= uint32_t{float_to_e4m3(y).bits} << (8 * (i % 4));
  }
  return make_uint2(codes[0], codes[1]);
}

__device__ __forceinline__ float abs_max8(uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float lo = fabsf(bits_float(w[i] << 16)), hi = fabsf(bits_float(w[i] & 0xFFFF0000u));
    amax = lo > amax ? lo : amax;
    amax = hi > amax ? hi : amax;
  }
  return amax;
}

// Max over the 16 lanes of each half-warp (exact, so the order does not matter).
__device__ __forceinline__ float half_warp_max(float a) {
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(kFullMask, a, offset);
    a = o > a ? o : a;
  }
  return a;
}

// One CTA writes kTokensPerBlock = 8 tokens, one warp each: token t's [576] bf16 row of kv
// ([T, 576], rows kv_stride apart) goes to pool row `slot` (FP8-656: 656 B, bf16: 1152 B).
//  FP8-656: lane l loads c[8l, 8l + 8) (tile l / 16) and c[256 + 8l, 256 + 8l + 8) (tile
//  2 + l / 16); half-warp maxima give the 4 tile scales; each lane stores its 2 x 8 codes, lane 0
//  the 16 bytes of scales, lanes 0..7 the 128 bytes of k_pe.
//  bf16: the 72 16-byte vectors of the row, lane l taking l, l + 32, l + 64.
template <LatentFormat kFormat, bool kChecked>
__global__ void __launch_bounds__(kThreads)
    latent_write_kernel(const bf16* __restrict__ kv, int64_t kv_stride,
                        const int32_t* __restrict__ slot, int32_t num_tokens, LatentPool pool,
                        cuda::DeviceErrorWord* error) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t t = blockIdx.x * kTokensPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= num_tokens) return;  // whole warps
  const int32_t s = slot[t];
  if (s == -1) return;
  const bool in_pool = s >= kPageSize && int64_t{s} < int64_t{pool.num_pages} * kPageSize;
  if (!in_pool) {
    if (kChecked && lane == 0) {
      cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kLatentWrite, t, s);
    }
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(kv + t * kv_stride);
  uint8_t* row = pool.data + latent_row_offset(pool, s);

  if constexpr (kFormat == LatentFormat::kBf16) {
    uint4 v[3];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      v[i] = lane + 32 * i < kRowVectors ? __ldg(src + lane + 32 * i) : make_uint4(0, 0, 0, 0);
    }
    if (kChecked) {
      uint32_t bad = 0;
#pragma unroll
      for (int i = 2; i >= 0; --i) {
        const uint32_t b = first_non_finite(v[i]);
        bad = b != 0 ? b : bad;
      }
      if (report_non_finite(bad, t, error)) return;
    }
    uint4* dst = reinterpret_cast<uint4*>(row);
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      if (lane + 32 * i < kRowVectors) dst[lane + 32 * i] = v[i];
    }
  } else {
    const uint4 c0 = __ldg(src + lane);       // c[8l, 8l + 8)
    const uint4 c1 = __ldg(src + 32 + lane);  // c[256 + 8l, 256 + 8l + 8)
    const bool has_pe = lane < kRopeDim / 8;  // 8 lanes x 8 bf16 of k_pe
    const uint4 pe = has_pe ? __ldg(src + 64 + lane) : make_uint4(0, 0, 0, 0);
    if (kChecked) {
      const uint32_t b0 = first_non_finite(c0), b1 = first_non_finite(c1),
                     b2 = first_non_finite(pe);
      if (report_non_finite(b0 != 0 ? b0 : (b1 != 0 ? b1 : b2), t, error)) return;
    }
    const int32_t e_lo = pow2_scale_exponent(half_warp_max(abs_max8(c0)));  // tile l / 16
    const int32_t e_hi = pow2_scale_exponent(half_warp_max(abs_max8(c1)));  // tile 2 + l / 16
    *reinterpret_cast<uint2*>(row + 8 * lane) = quantize8(c0, e_lo);
    *reinterpret_cast<uint2*>(row + kLatentDim / 2 + 8 * lane) = quantize8(c1, e_hi);
    const float s_lo = pow2_float(e_lo), s_hi = pow2_float(e_hi);
    const float s_tile1 = __shfl_sync(kFullMask, s_lo, 16);
    const float s_tile3 = __shfl_sync(kFullMask, s_hi, 16);
    if (lane == 0) {
      *reinterpret_cast<float4*>(row + kFp8ScaleOffset) = make_float4(s_lo, s_tile1, s_hi, s_tile3);
    }
    if (has_pe) reinterpret_cast<uint4*>(row + kFp8RopeOffset)[lane] = pe;
  }
}

template <LatentFormat kFormat>
Status launch(const LatentWriteParams& p, bool checked, cuda::DeviceErrorWord* error) {
  const int64_t blocks = (int64_t{p.num_tokens} + kTokensPerBlock - 1) / kTokensPerBlock;
  cudaStream_t stream = cuda::current_stream();
  if (checked) {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(dim3(unsigned(blocks))), dim3(kThreads), size_t(0), stream},
        latent_write_kernel<kFormat, true>, p.kv, kv_row_stride(p), p.slot, p.num_tokens, p.pool,
        error));
  } else {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(dim3(unsigned(blocks))), dim3(kThreads), size_t(0), stream},
        latent_write_kernel<kFormat, false>, p.kv, kv_row_stride(p), p.slot, p.num_tokens, p.pool,
        error));
  }
  return ok_status();
}

}  // namespace

Status latent_write_cuda(const LatentWriteParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  // 16-byte vectors: rows are 1152 B (bf16 source and pool) or 656 B = 41 x 16 (FP8-656), and the
  // FP8 row's scales (+512) and k_pe (+528) are 16-byte aligned too.
  DSA_RETURN_IF_ERROR(
      cuda::require_aligned("latent_write_cuda", "kv and pool.data", {p.kv, p.pool.data}, 16));
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * error, cuda::device_error_word());
  const bool checked = checked_mode();
  if (p.pool.format == LatentFormat::kBf16) {
    DSA_RETURN_IF_ERROR(launch<LatentFormat::kBf16>(p, checked, error));
  } else {
    DSA_RETURN_IF_ERROR(launch<LatentFormat::kFp8_656>(p, checked, error));
  }
  return cuda::end_launch("latent_write_kernel", checked, "latent_write_cuda");
}

}  // namespace dsa::kernels
