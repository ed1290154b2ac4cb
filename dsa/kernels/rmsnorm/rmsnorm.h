// RMSNorm (SPEC.md §8.3) and the residual add of the decoder layer (§8.6).
//   rmsnorm:      y = x * (mean(x^2) + eps)^-1/2 * w, bf16 in, bf16 out (class T, <= 1 bf16 ulp
//                 from the correctly rounded value; the reference IS the correctly rounded value).
//   residual_add: h += x, computed in fp32 from the two bf16 operands, rounded once (RNE).
//   add_rmsnorm:  residual_add then rmsnorm of the updated h, in one op: the decoder layer's
//                 `h += branch; x = norm(h)` pair in one launch instead of two (at small batch a
//                 forward is bound by launch latency, not bytes).
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct RmsNormParams {
  const bf16* x = nullptr;       // [T, D] bf16 input rows, row stride x_stride
  const bf16* weight = nullptr;  // [D] bf16 norm weight
  bf16* y = nullptr;             // [T, D] bf16 output rows, row stride y_stride; may equal x
  int32_t num_tokens = 0;        // T
  int32_t dim = 0;               // D
  // Elements between consecutive rows; 0 = dim. Lets the norm read the first 512 values of a
  // 576-wide kv_a row (§8.4) without a copy.
  int64_t x_stride = 0;
  int64_t y_stride = 0;
  float eps = 1e-6f;  // rms_norm_eps
  // Optional row gather, so a norm whose input is a row selection needs no copy first (the
  // embedding lookup, the MTP layer's hidden rows of the previous forward): with x_rows set, input
  // row t is row x_rows[t] of x (x_row_bound rows, x_stride apart), read in backend memory. An
  // entry outside [0, x_row_bound) reads a zero row (y[t] is the norm of zeros, as if the rows had
  // been gathered into a zero-filled buffer first); in checked mode it is also OutOfRange naming
  // t and the entry, except -1 when skip_minus_one (a row deliberately left out).
  const int32_t* x_rows = nullptr;  // [T] int32, backend memory
  int32_t x_row_bound = 0;          // >= 1 with x_rows
  bool skip_minus_one = false;
  // With x_rows: also store each gathered input row (zeros for entries outside the bound) to
  // x_copy[t] (row stride D), the embedding's output where the residual stream starts from it.
  bf16* x_copy = nullptr;
};

// Host checks (InvalidArgument): T >= 0, D >= 1, pointers, strides >= D, eps finite and > 0;
// with x_rows: x_row_bound >= 1, and y and x_copy overlapping neither x nor each other.
Status validate(const RmsNormParams& p);

// CPU reference: mean(x^2) and the product accumulated in double, rounded once to bf16. Rows are
// independent; y == x (in place) is allowed without x_rows, partial overlap is not. Non-finite
// inputs propagate. Checked mode: a gathered entry out of range (above) is OutOfRange, nothing
// written.
Status rmsnorm_ref(const RmsNormParams& p);
// CUDA backend (params hold device pointers): one block per row, fp32 math, bf16 out. A gathered
// norm runs the plain norm's row code and launch shape, so it is bit-identical to row_copy's gather
// into a zeroed dense buffer followed by the plain norm of it when both take the same path: the
// 16-byte vector path wherever x, x_stride, x_copy, y, y_stride and w are 16-byte aligned
// (D % 8 == 0, D <= 65536), the scalar path where D % 8 != 0; otherwise within 1 bf16 ulp of it.
// Checked mode reports bad entries through the device error word.
Status rmsnorm_cuda(const RmsNormParams& p);

// Two norms in one launch: the MTP layer's enorm of the embedding rows and hnorm of the last
// forward's hidden rows, which write the two halves of one concatenated row (SPEC.md §6.5). At
// decode shapes the forward is bound by launch latency, and the pair is one kernel fewer per MTP
// forward. The result is rmsnorm(first) and rmsnorm(second), in either order: neither may read
// what the other writes (validate_pair).
//
// Host checks (InvalidArgument naming the norm and the field): each norm's validate(), the same
// num_tokens and dim, neither norm's y (nor x_copy) overlapping the other's x, and no element
// written by both (interleaved rows of one stride, as the MTP layer's halves, are fine).
Status validate_pair(const RmsNormParams& first, const RmsNormParams& second);

// CPU reference: rmsnorm_ref(first) then rmsnorm_ref(second), after validate_pair.
Status rmsnorm_pair_ref(const RmsNormParams& first, const RmsNormParams& second);
// CUDA backend: one launch (grid.y picks the norm) where both norms are gathered and take the
// vector path with the same NormShape, running rmsnorm_cuda's row code, so each y is
// bit-identical to rmsnorm_cuda's; otherwise (dense or scalar-path pairs) the two launches of
// rmsnorm_cuda. In checked mode a bad entry of either norm reports its row t (not which norm).
Status rmsnorm_pair_cuda(const RmsNormParams& first, const RmsNormParams& second);

struct ResidualAddParams {
  bf16* h = nullptr;        // [T, D] bf16 residual stream, updated in place
  const bf16* x = nullptr;  // [T, D] bf16 branch output added to h
  int32_t num_tokens = 0;   // T
  int32_t dim = 0;          // D
};

// Host checks (InvalidArgument): T >= 0, D >= 1, pointers.
Status validate(const ResidualAddParams& p);

// CPU reference: h = bf16(float(h) + float(x)), one fp32 add, one RNE rounding (§8.6).
Status residual_add_ref(const ResidualAddParams& p);
// CUDA backend (device pointers): bit-identical to residual_add_ref.
Status residual_add_cuda(const ResidualAddParams& p);

struct AddRmsNormParams {
  bf16* h = nullptr;             // [T, D] bf16 residual stream, row stride D, updated in place
  const bf16* add = nullptr;     // [T, D] bf16 branch output added to h, row stride D
  const bf16* weight = nullptr;  // [D] bf16 norm weight
  // [T, D] bf16 norm of the updated h, row stride y_stride. Its own buffer: it may not overlap h
  // or add (the CUDA kernel writes y while other rows of h and add are still being read).
  bf16* y = nullptr;
  int32_t num_tokens = 0;  // T
  int32_t dim = 0;         // D
  int64_t y_stride = 0;    // elements between output rows; 0 = dim
  float eps = 1e-6f;       // rms_norm_eps
};

// Host checks (InvalidArgument): T >= 0, D >= 1, y_stride 0 or >= D, eps finite and > 0,
// pointers, and y's rows overlapping neither h nor add.
Status validate(const AddRmsNormParams& p);

// CPU reference: residual_add_ref on (h, add), then rmsnorm_ref from the updated h into y, so h is
// bit-identical to residual_add_ref's and y to rmsnorm_ref's on that h, by construction.
Status add_rmsnorm_ref(const AddRmsNormParams& p);
// CUDA backend (device pointers), one launch: h bit-identical to residual_add_cuda's, y
// bit-identical to rmsnorm_cuda's on the updated h with the same y and y_stride (the same kernel
// path, thread count and reduction order), so within 1 bf16 ulp of add_rmsnorm_ref's y.
Status add_rmsnorm_cuda(const AddRmsNormParams& p);

}  // namespace dsa::kernels
