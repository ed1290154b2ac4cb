// The attention prologue on the GPU (SPEC.md §8.4, §8.5 steps 2-3): one launch, one block per
// (token t, part), for what rmsnorm_cuda, rmsnorm_cuda, rope_cuda, layernorm_cuda, rope_cuda and
// hadamard_cuda did in six.
//   part 0 (q):      cq[t] = rmsnorm(qa[t]): rmsnorm_cuda's vector row (rmsnorm_row.cuh) on its
//                    own thread count;
//   part 1 (latent): rmsnorm of latent[t, 0:512] in place (64 threads, one vector each), and the
//                    interleaved RoPE of latent[t, 512:576] by warp 2, which the norm leaves idle
//                    (disjoint columns: nothing to order between the two);
//   part 2 (key):    layernorm_cuda's row (layernorm_row.cuh, 128 threads) into shared memory,
//                    rounded to bf16 as layernorm_cuda stores it; then warp 0 ropes k[0:64] there
//                    (rope_kernel's pairs and rotation, rope_rotate.cuh), rounded to bf16 as
//                    rope_cuda stores it; then the same warp's Hadamard (hadamard_warp.cuh) to k.
// Every part runs the arithmetic of the op it replaces in that op's order: the norms own the same
// vectors / elements with the same thread counts as their own launches, and the block's extra
// threads add +0 to the block sums (see the row headers), so the fused op is bit-identical to the
// six launches. Rows the vector norm cannot take (a width not a multiple of 8, a stride or pointer
// not 16-byte aligned, q_lora > 2048) run those six launches instead (the fallback, bit-identical
// by construction).
//
// A position outside [0, T_rope) leaves both rotated rows of that token unrotated (the tables are
// never read out of bounds), as rope_cuda does; in checked mode the latent part reports it once
// per token through the device error word (OutOfRange {t, pos}), so the call returns OutOfRange.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "dsa/core/checked_mode.h"
#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/attention_prologue/attention_prologue.h"
#include "dsa/kernels/attention_prologue/attention_prologue_parts.h"
#include "dsa/kernels/common/hadamard_warp.cuh"
#include "dsa/kernels/common/layernorm_row.cuh"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/common/rmsnorm_row.cuh"
#include "dsa/kernels/common/rope_rotate.cuh"

namespace dsa::kernels {

namespace {

using layernorm_dev::layernorm_row;
using layernorm_dev::layernorm_threads;
using rmsnorm_dev::kVecElems;
using rmsnorm_dev::norm_row_vec;
using rmsnorm_dev::norm_shape;
using rmsnorm_dev::NormInput;
using rmsnorm_dev::NormShape;

enum Part : unsigned { kPartQ = 0, kPartLatent = 1, kPartKey = 2, kParts = 3 };

constexpr int kMaxThreads = 256;  // the q norm's shape at its widest fused width (nvec 256)
constexpr int32_t kLatentVecs = kLatentDim / kVecElems;  // 64
constexpr int kLatentRopeWarp = 2;  // the first warp the latent norm leaves idle
static_assert(kLatentRopeWarp * 32 >= kLatentVecs);

// The widths travel as values, as they do to the separate kernels: a compile-time width would let
// nvcc fold "sum / D + eps" into an FMA with 1 / D, which the separate kernels do not do.
struct PrologueArgs {
  const bf16* qa;
  int64_t qa_ld;
  const bf16* q_a_norm_w;
  bf16* cq;
  int32_t q_nvec;     // q_lora / 8
  int32_t q_threads;  // rmsnorm_cuda's thread count for the q norm
  bf16* latent;
  int64_t latent_ld;
  const bf16* kv_a_norm_w;
  int32_t latent_nvec;     // 512 / 8
  int32_t latent_threads;  // rmsnorm_cuda's thread count for the latent norm (64)
  const bf16* k_raw;
  int64_t k_raw_ld;
  const float* k_norm_w;
  const float* k_norm_b;
  bf16* k;
  int32_t k_dim;      // 128
  int32_t k_threads;  // layernorm_cuda's thread count for D = 128 (128)
  bool index_interleaved;
  const int32_t* positions;
  const float* cos;
  const float* sin;
  int32_t num_positions;
  float rms_eps;
  float layernorm_eps;
  cuda::DeviceErrorWord* err;  // null unless checked
};

// Rotates pair `lane` of the 64 values at x with cos/sin[pos], as rope_kernel does in place.
__device__ __forceinline__ void rope_pair_in_place(bf16* x, bool interleaved, int lane, int32_t pos,
                                                   const float* __restrict__ cos_table,
                                                   const float* __restrict__ sin_table) {
  const int32_t ia = rope_pair_first(interleaved, lane), ib = rope_pair_second(interleaved, lane);
  bf16 a = x[ia], b = x[ib];
  const float c = cos_table[int64_t{pos} * kRopePairs + lane];
  const float s = sin_table[int64_t{pos} * kRopePairs + lane];
  rope_rotate_pair(a, b, c, s);
  x[ia] = a;
  x[ib] = b;
}

__global__ void __launch_bounds__(kMaxThreads) attention_prologue_kernel(PrologueArgs a) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // blockIdx.y is uniform over the block: every thread takes the same part, so the block-wide
  // reductions inside each part are reached by every thread.
  if (blockIdx.y == kPartQ) {
    norm_row_vec<1>(NormInput{a.qa, a.qa_ld}, a.q_a_norm_w, a.cq, a.q_nvec, a.q_nvec * kVecElems,
                    a.rms_eps, t, a.q_threads);
    return;
  }
  const int32_t pos = a.positions[t];
  const bool in_table = pos >= 0 && pos < a.num_positions;
  if (blockIdx.y == kPartLatent) {
    if (warp == kLatentRopeWarp) {
      if (in_table) {
        rope_pair_in_place(a.latent + t * a.latent_ld + kLatentDim, true, lane, pos, a.cos, a.sin);
      } else if (lane == 0) {
        cuda::report_device_error(a.err, StatusCode::kOutOfRange, cuda::OpId::kModelOp,
                                  static_cast<int32_t>(t), pos);
      }
    }
    // In place: each of the 64 norm threads reads its vector of [0, 512) before the block sum
    // and writes it after; the rope above touches only [512, 576).
    norm_row_vec<1>(NormInput{a.latent, a.latent_ld}, a.kv_a_norm_w, a.latent, a.latent_nvec,
                    a.latent_ld, a.rms_eps, t, a.latent_threads);
    return;
  }
  // kPartKey. The row between the steps, in bf16 as the separate ops store it to k.
  __shared__ bf16 krow[kIndexHeadDim];
  __shared__ double scratch[33];
  layernorm_row(a.k_raw + t * a.k_raw_ld, a.k_norm_w, a.k_norm_b, krow, a.k_dim, a.layernorm_eps,
                a.k_threads, scratch);
  __syncthreads();  // krow complete (written by the layernorm's threads) before warp 0 reads it
  if (warp != 0) return;
  if (in_table) {
    rope_pair_in_place(krow, a.index_interleaved, lane, pos, a.cos, a.sin);
    __syncwarp();  // the roped values of other lanes before the Hadamard's loads
  }
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = bf16_to_float(krow[4 * lane + j]);
  hadamard128_warp(v, lane);
  bf16* out = a.k + t * kIndexHeadDim + 4 * lane;
#pragma unroll
  for (int j = 0; j < 4; ++j) out[j] = float_to_bf16(v[j]);
}

// The six separate launches, for rows the fused kernel does not take (attention_prologue_parts.h).
Status run_unfused(const AttentionPrologueParams& p) {
  const AttentionPrologueParts s = attention_prologue_parts(p);
  DSA_RETURN_IF_ERROR(rmsnorm_cuda(s.q_norm));
  DSA_RETURN_IF_ERROR(rmsnorm_cuda(s.latent_norm));
  DSA_RETURN_IF_ERROR(rope_cuda(s.latent_rope));
  DSA_RETURN_IF_ERROR(layernorm_cuda(s.k_norm));
  DSA_RETURN_IF_ERROR(rope_cuda(s.k_rope));
  return hadamard_cuda(s.k_hadamard);
}

}  // namespace

bool attention_prologue_cuda_fuses(const AttentionPrologueParams& p) {
  // The shapes rmsnorm_cuda would launch: fused only where both norms take the vector path with one
  // vector per thread (q_lora <= 2048, so at most kMaxThreads threads).
  const NormShape q = norm_shape(p.q_lora, p.qa_ld, p.q_lora, p.qa, p.cq, p.q_a_norm_w);
  const NormShape lat =
      norm_shape(kLatentDim, p.latent_ld, p.latent_ld, p.latent, p.latent, p.kv_a_norm_w);
  return q.vec && q.slot == 0 && q.threads <= kMaxThreads && lat.vec && lat.slot == 0;
}

Status attention_prologue_cuda(const AttentionPrologueParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  if (!attention_prologue_cuda_fuses(p)) return run_unfused(p);
  const NormShape q = norm_shape(p.q_lora, p.qa_ld, p.q_lora, p.qa, p.cq, p.q_a_norm_w);
  const NormShape lat =
      norm_shape(kLatentDim, p.latent_ld, p.latent_ld, p.latent, p.latent, p.kv_a_norm_w);
  const int k_threads = layernorm_threads(kIndexHeadDim);
  const int threads = std::max({q.threads, lat.threads, k_threads, (kLatentRopeWarp + 1) * 32});

  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  PrologueArgs a;
  a.qa = p.qa;
  a.qa_ld = p.qa_ld;
  a.q_a_norm_w = p.q_a_norm_w;
  a.cq = p.cq;
  a.q_nvec = p.q_lora / kVecElems;
  a.q_threads = q.threads;
  a.latent = p.latent;
  a.latent_ld = p.latent_ld;
  a.kv_a_norm_w = p.kv_a_norm_w;
  a.latent_nvec = kLatentVecs;
  a.latent_threads = lat.threads;
  a.k_raw = p.k_raw;
  a.k_raw_ld = p.k_raw_ld;
  a.k_norm_w = p.k_norm_w;
  a.k_norm_b = p.k_norm_b;
  a.k = p.k;
  a.k_dim = kIndexHeadDim;
  a.k_threads = k_threads;
  a.index_interleaved = p.index_rope_style == RopeStyle::kInterleaved;
  a.positions = p.positions;
  a.cos = p.cos;
  a.sin = p.sin;
  a.num_positions = p.num_positions;
  a.rms_eps = p.rms_eps;
  a.layernorm_eps = p.layernorm_eps;
  a.err = err;
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(p.num_tokens), kParts),
                                     dim3(threads), size_t(0), cuda::current_stream()},
                   attention_prologue_kernel, a));
  return cuda::end_launch("attention_prologue", checked,
                          "attention_prologue: positions[row] outside [0, num_positions)");
}

}  // namespace dsa::kernels
