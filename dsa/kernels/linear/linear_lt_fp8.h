// cuBLASLt's block-scaled FP8 GEMM on tokens already quantised, for an op that quantises and lays
// out its own tokens (the FP8 grouped linear's prefill form, kernels/moe_dispatch): the same
// cached plans, workspace and scale modes as linear_cuda's many-token path (linear_cuda.cu).
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/linear/linear.h"

namespace dsa::kernels::linear_fp8 {

// Whether cuBLASLt's block-scaled GEMM computes this shape right (tools/probe_fp8_blockscale.cu):
// whole 128-column blocks of `in`, a multiple of 4 of them.
bool lt_shape_supported(int32_t in_features);

// y = x W^T for p's T tokens (a multiple of 4) from x8 [T][in] e4m3 and their scales, block k of
// token t at sx[k * T + t] (device pointers; p.x is ignored, p.weight_fp8 / p.weight_scale_inv /
// p.y or p.y_f32 are used). On the current stream; *ran = false when cuBLASLt offers no algorithm
// for the shape (nothing was launched).
Status lt_prequantized_matmul(const LinearParams& p, const uint8_t* x8, const float* sx, bool* ran);

}  // namespace dsa::kernels::linear_fp8
