// CUDA indexer key write (SPEC.md §3a): quantise each key with the power-of-two rule (§2.1) and
// scatter (values, scale) to the token-major page layout of §2.2. Class E: the scale exponent,
// the clamp and the e4m3 rounding are the DSA_HD functions of dsa/core (fp8_quant.h, dtype.h)
// that the CPU reference runs, and the amax is an exact max, so the bytes are identical.
#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/indexer_write/indexer_write.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kLanesPerToken = 16;                              // 16 lanes x 8 values = D_i = 128
constexpr int kValuesPerLane = kIndexHeadDim / kLanesPerToken;  // 8 bf16 = one 16-byte load
constexpr int kTokensPerBlock = kThreads / kLanesPerToken;      // 16

__device__ __forceinline__ bool bf16_bits_finite(uint32_t h) { return (h & 0x7F80u) != 0x7F80u; }

// One CTA writes kTokensPerBlock = 16 tokens. A half-warp owns token t: lane l loads
// k[t, 8l : 8l + 8] (16 B of the [T, 128] bf16 keys), the half reduces max|x| with xor-shuffles
// that never cross halves, and each lane stores its 8 e4m3 codes (8 B) at
// page(slot) + o(slot) * 128 + 8l; lane 0 stores the fp32 scale at page + 8192 + 4 o.
// Skipped tokens (slot -1, or out of pool when unchecked) retire their whole half at once.
template <bool kChecked>
__global__ void __launch_bounds__(kThreads)
    indexer_write_kernel(const bf16* __restrict__ k, const int32_t* __restrict__ slot,
                         int32_t num_tokens, IndexerPool pool, cuda::DeviceErrorWord* error) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t t = blockIdx.x * kTokensPerBlock + threadIdx.x / kLanesPerToken;
  const int lane = threadIdx.x % kLanesPerToken;
  const unsigned half_mask = 0xFFFFu << (threadIdx.x & 16u);
  if (t >= num_tokens) return;
  const int32_t s = slot[t];
  if (s == -1) return;
  const bool in_pool = s >= kPageSize && int64_t{s} < int64_t{pool.num_pages} * kPageSize;
  if (!in_pool) {
    if (kChecked && lane == 0) {
      cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kIndexerWrite, t, s);
    }
    return;
  }

  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(k + int64_t{t} * kIndexHeadDim) + lane);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  float x[kValuesPerLane];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = bits_float(words[i] << 16);
    x[2 * i + 1] = bits_float(words[i] & 0xFFFF0000u);
  }

  if (kChecked) {
    // Non-finite keys: report the first offending bf16 bit pattern of the token.
    uint32_t bad_bits = 0;
    bool bad = false;
#pragma unroll
    for (int i = 7; i >= 0; --i) {
      const uint32_t h = (i % 2 == 0) ? (words[i / 2] & 0xFFFFu) : (words[i / 2] >> 16);
      if (!bf16_bits_finite(h)) {
        bad = true;
        bad_bits = h;
      }
    }
    const unsigned ballot = __ballot_sync(half_mask, bad);
    if (ballot != 0) {
      const int first = __ffs(ballot) - 1;
      if ((threadIdx.x % 32) == unsigned(first)) {
        cuda::report_device_error(error, StatusCode::kOutOfRange, cuda::OpId::kIndexerWrite, t,
                                  static_cast<int32_t>(bad_bits));
      }
      return;
    }
  }

  // amax: an exact max, so the shuffle order cannot change it (inputs are finite).
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    const float a = fabsf(x[i]);
    amax = a > amax ? a : amax;
  }
#pragma unroll
  for (int offset = kLanesPerToken / 2; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(half_mask, amax, offset);
    amax = o > amax ? o : amax;
  }

  // The per-value steps of quantize_block_pow2 (fp8_quant.h), on this lane's 8 values.
  const int32_t e = pow2_scale_exponent(amax);
  const float inv = pow2_float(-e);
  uint32_t codes[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    float y = x[i] * inv;  // exact: multiplication by a power of two
    y = y > kE4m3Max ? kE4m3Max : (y < -kE4m3Max ? -kE4m3Max : y);
    codes[i / 4] |= uint32_t{float_to_e4m3(y).bits} << (8 * (i % 4));
  }
  uint8_t* value_dst = pool.data + indexer_value_offset(pool, s) + lane * kValuesPerLane;
  *reinterpret_cast<uint2*>(value_dst) = make_uint2(codes[0], codes[1]);
  if (lane == 0) {
    *reinterpret_cast<float*>(pool.data + indexer_scale_offset(pool, s)) = pow2_float(e);
  }
}

}  // namespace

Status indexer_write_cuda(const IndexerWriteParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  // 16-byte key loads and 8-byte code stores (the page stride 8448 and the 128-byte token rows
  // keep every store aligned once the pool base is).
  DSA_RETURN_IF_ERROR(
      cuda::require_aligned("indexer_write_cuda", "k and pool.data", {p.k, p.pool.data}, 16));
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * error, cuda::device_error_word());
  const bool checked = checked_mode();
  const int64_t blocks = (int64_t{p.num_tokens} + kTokensPerBlock - 1) / kTokensPerBlock;
  cudaStream_t stream = cuda::current_stream();
  if (checked) {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(dim3(unsigned(blocks))), dim3(kThreads), size_t(0), stream},
        indexer_write_kernel<true>, p.k, p.slot, p.num_tokens, p.pool, error));
  } else {
    DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
        cuda::LaunchShape{dim3(dim3(unsigned(blocks))), dim3(kThreads), size_t(0), stream},
        indexer_write_kernel<false>, p.k, p.slot, p.num_tokens, p.pool, error));
  }
  return cuda::end_launch("indexer_write_kernel", checked, "indexer_write_cuda");
}

}  // namespace dsa::kernels
