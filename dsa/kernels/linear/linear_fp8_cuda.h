// The FP8 block-scaled linear's fast CUDA paths (SPEC.md §8.8), internal to linear_cuda.cu:
// the token quantiser, the few-token wgmma kernel (linear_fp8_wgmma.cuh) and the per-stream
// scratch both need. cuBLASLt's block-scaled GEMM (the many-token path) lives with the other
// cuBLASLt code in linear_cuda.cu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "dsa/core/status.h"
#include "dsa/kernels/linear/linear.h"

namespace dsa::kernels::linear_fp8 {

// Device scratch of one stream, allocated on its first FP8 linear (warm-up, before any graph
// capture) and reused: quantised tokens, their scales, split-K partial sums and the split-K
// tickets (zeroed once; every launch leaves them zero again).
struct Scratch {
  uint8_t* x8 = nullptr;  // quantised tokens
  size_t x8_bytes = 0;
  float* sx = nullptr;  // their block scales
  float* partial = nullptr;
  size_t partial_floats = 0;
  uint32_t* tickets = nullptr;
  int32_t max_tiles = 0;
};

// The few-token kernel's arguments: pointers, sizes and the split-K plan (linear_fp8_wgmma.cuh).
struct SmallArgs {
  const float* sw = nullptr;  // [ceil(out / 128)][nkb] weight block scales
  const float* sx = nullptr;  // token t's scale of block k: sx[k * sx_ld + t] (two-kernel form)
  int32_t sx_ld = 0;          //
  int32_t rows = 0;           // tokens of this launch, 1..N
  int32_t out = 0;            // output features
  int32_t nkb = 0;            // K blocks
  int32_t kb_per_split = 0;
  int32_t splits = 1;
  float* partial = nullptr;     // [splits][tiles][128 threads][N / 2] (splits > 1)
  uint32_t* tickets = nullptr;  // [tiles], zero between launches (splits > 1)
  bf16* y = nullptr;            // [rows][out], or
  float* y_f32 = nullptr;       // [rows][out]
  const bf16* x = nullptr;      // the fused form's tokens [rows][in] (bf16, 16-byte aligned rows)
  int32_t in = 0;               // input features (the fused form)
};

StatusOr<Scratch> allocate_scratch();
// The sizes allocate_scratch gives (pointers null): what the split plans are bounded by.
Scratch scratch_sizes();

// The few-token kernel's limit on tokens per launch (wgmma N <= 64).
inline constexpr int32_t kSmallMaxRows = 64;

// Whether the fast paths take this linear: FP8 weight, in a multiple of 16 (the copy engine's
// row stride), 16-byte aligned weight and activations.
bool fast_path_supported(const LinearParams& p);

// Quantises x [rows][in] bf16 per (token, 128 columns) with §2.1's power-of-two rule into
// x8 [rows][in] e4m3 and sx[k * rows + t] (block k of token t: the order cuBLASLt's VEC128 scales
// take). Inputs are taken as finite (the checked-mode path is the simple kernel).
Status quantize_tokens(const bf16* x, int32_t rows, int32_t in, uint8_t* x8, float* sx);

// y rows [0, rows) of p's linear from tokens already quantised: x8 [rows][in], token t's scale of
// block k at sx[k * sx_ld + t]; 1 <= rows <= kSmallMaxRows. p.y / p.y_f32 point at the first row.
Status small_gemm(const LinearParams& p, int32_t rows, const uint8_t* x8, const float* sx,
                  int32_t sx_ld, const Scratch& scratch);

// The fused form: one kernel quantises p.x's rows [0, rows) and multiplies (the same codes,
// scales and sums as quantize_tokens + small_gemm, bit for bit), for rows <= kFusedMaxRows.
// fused_plan gives its launch plan where it takes the shape (the split-K plan must leave each CTA
// few enough K blocks for its token area, linear_fp8_wgmma.cuh) and DSA_FP8_FUSED_QUANT=0 (for
// side-by-side runs; read at each call, so a test can run both forms) has not turned it off;
// fused_small_gemm launches that plan.
inline constexpr int32_t kFusedMaxRows = 32;
std::optional<SmallArgs> fused_plan(const LinearParams& p, int32_t rows, const Scratch& scratch);
Status fused_small_gemm(const LinearParams& p, const SmallArgs& plan);

}  // namespace dsa::kernels::linear_fp8
