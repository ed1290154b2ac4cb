// Strided-batched linear layers y[b] = x[b] W[b]^T, b in [0, batch): bf16 operands and output,
// wide accumulation (SPEC.md §8.8's bf16 class). The absorbed MLA's per-head products (§8.4:
// q_nope[h] W_UK[h] and o_lat[h] W_UV[h]^T) run as one such op over every head: each operand is
// addressed by a leading dimension (token to token) and a batch stride (head to head), so the
// [rows, H, d] activations are read and written where they lie, with no per-head copies, and the
// op count per layer does not depend on H.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

// Strides above this many elements are refused: every address computation then fits int64.
inline constexpr int64_t kBatchedLinearMaxStride = int64_t{1} << 40;

struct BatchedLinearParams {
  const bf16* x = nullptr;       // x[b][t][j] at x[b * x_batch_stride + t * x_ld + j]
  const bf16* weight = nullptr;  // W[b][i][j] at weight[b * w_batch_stride + i * in + j]
  bf16* y = nullptr;             // y[b][t][i] at y[b * y_batch_stride + t * y_ld + i]
  int32_t batch = 0;             // B
  int32_t num_tokens = 0;        // T
  int32_t in_features = 0;       // in
  int32_t out_features = 0;      // out
  int64_t x_ld = 0, x_batch_stride = 0;
  int64_t w_batch_stride = 0;
  int64_t y_ld = 0, y_batch_stride = 0;
};

// Host checks (InvalidArgument, naming the field and its value): B >= 1, T >= 0, in >= 1,
// out >= 1; x_ld >= in, y_ld >= out, w_batch_stride >= out * in, x_batch_stride >= 0, every
// stride <= kBatchedLinearMaxStride; no two outputs share an element — the batches either side
// by side within a token's row ((B - 1) y_batch_stride + out <= y_ld) or one after another
// ((T - 1) y_ld + out <= y_batch_stride); x, weight, y non-null unless T = 0. y must not overlap
// x or the weight (not checked).
Status validate(const BatchedLinearParams& p);

// CPU reference: every batch exactly as linear_ref computes a bf16-weight linear (products exact
// in double, four interleaved partial sums in one fixed order, one rounding to bf16), so a model
// that moves its per-head linears here computes bit for bit what it did.
Status batched_linear_ref(const BatchedLinearParams& p);
// CUDA backend (device pointers): one cuBLASLt strided-batched matmul (bf16 in and out, fp32
// accumulation), its plan cached per shape, strides and alignment; a simple kernel where
// cuBLASLt offers no algorithm. Graph-capturable once a shape has run (the warm-up).
Status batched_linear_cuda(const BatchedLinearParams& p);

// Per-output bounds for comparing another backend with the reference, linear's bf16 class:
// bound = 2^-12 M + 2^-7 |ref| with M = sum_j |x_j w_j|. ref and bound are dense
// [B, T, out] fp32 (ref the reference output upcast). Status as validate(), plus ref / bound.
Status batched_linear_tolerance_bounds(const BatchedLinearParams& p, const float* ref,
                                       float* bound);

}  // namespace dsa::kernels
