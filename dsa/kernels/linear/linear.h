// Linear layers y = x W^T (SPEC.md §8.8), with a bf16 weight or an FP8 (e4m3, 128x128 block
// scales) weight, and a bf16 or fp32 output (§8.3: weights_proj, the router and the LM head
// output fp32).
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

inline constexpr int32_t kLinearBlock = 128;  // FP8 weight block and activation block (§2.1)

struct LinearParams {
  const bf16* x = nullptr;  // [T, in] bf16 activations
  // Exactly one of the two weight forms:
  const bf16* weight = nullptr;         // [out, in] bf16
  const uint8_t* weight_fp8 = nullptr;  // [out, in] e4m3 codes (W8)
  // [ceil(out/128), ceil(in/128)] fp32: W[i][j] = e4m3(W8[i][j]) * s[i/128][j/128]. Only with
  // weight_fp8.
  const float* weight_scale_inv = nullptr;
  // Exactly one of the two outputs:
  bf16* y = nullptr;         // [T, out] bf16
  float* y_f32 = nullptr;    // [T, out] fp32
  int32_t num_tokens = 0;    // T
  int32_t in_features = 0;   // in
  int32_t out_features = 0;  // out
};

// Host checks (InvalidArgument): T >= 0, in >= 1, out >= 1, exactly one weight form (and the
// scale with, and only with, the FP8 one), exactly one output, pointers, the output not
// overlapping x.
Status validate(const LinearParams& p);

// CPU reference. FP8 weight: x is quantised per (token, 128 columns) with §2.1 (a shorter last
// block when in % 128 != 0) and dequantised exactly; both operands' products are exact in double,
// summed in double in a fixed order, rounded once. Each output element is independent of the
// others and of the batch. Checked mode (FP8 only): a non-finite x (the quantiser's contract,
// §2.1) or weight_scale_inv is OutOfRange, nothing written.
Status linear_ref(const LinearParams& p);
// CUDA backend (device pointers): bf16 weights through cuBLASLt; FP8 weights through a few-token
// wgmma kernel (below 32 tokens; where the split allows, it quantises the tokens itself) or
// cuBLASLt's block-scaled FP8 GEMM (more), after quantising the tokens into per-stream scratch.
// That scratch (with the split-K partials) is allocated on the stream's first FP8 call, so that
// call must come before any graph capture, as the warm-up does. Checked mode takes a simple fused
// kernel that checks every input.
Status linear_cuda(const LinearParams& p);

// For an op that quantises and lays out its own tokens (the FP8 grouped linear's prefill form,
// kernels/moe_dispatch): cuBLASLt's block-scaled FP8 GEMM with linear_cuda's cached plans,
// workspace and scale modes. linear_lt_shape_supported: whether cuBLASLt computes this `in` right
// (whole 128-column blocks, a multiple of 4 of them; tools/probe_fp8_blockscale.cu).
// linear_fp8_prequantized_cuda: y = x W^T for p's T tokens (a multiple of 4) from x8 [T][in] e4m3
// and their scales, block k of token t at sx[k * T + t] (device pointers; p.x is ignored), on the
// current stream; *ran = false when cuBLASLt offers no algorithm for the shape (nothing launched).
bool linear_lt_shape_supported(int32_t in_features);
Status linear_fp8_prequantized_cuda(const LinearParams& p, const uint8_t* x8, const float* sx,
                                    bool* ran);

// §8.8's class-T bound for one output: with M = sum_j |x^_j w^_j| over the dequantised operands,
// |got - ref| <= 2^-8 M + 2^-7 |ref| (FP8 weight) or 2^-12 M + 2^-7 |ref| (bf16 weight).
double linear_tolerance(bool fp8_weight, double abs_dot, double ref);

// Per-output bounds for comparing another backend with the reference: bound[t][i] =
// linear_tolerance(fp8, M[t][i], ref[t][i]), M from the same dequantised operands as linear_ref.
// ref: [T, out] fp32 (the reference output, upcast when it is bf16); bound: [T, out] fp32.
// p's outputs are not used. Status as validate().
Status linear_tolerance_bounds(const LinearParams& p, const float* ref, float* bound);

}  // namespace dsa::kernels
