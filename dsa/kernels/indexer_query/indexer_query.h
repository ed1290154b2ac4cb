// The lightning indexer's query side after its projection (SPEC.md §8.5 steps 1, 3-5), in one
// launch where it was four (a copy out of the fused q_b linear's columns, rope, hadamard,
// indexer_q_quant). For each token t and indexer head h, the 128 values q[t, h, :]:
//   r  = hadamard(rope_style(q[t, h, :]))   (the rope on the first 64 values; each step rounded to
//                                            bf16 as the separate ops round it)
//   q8[t, h, :] = e4m3 codes of r with its §2.1 power-of-two scale 2^e (quantize_block_pow2)
//   w[t, h]    *= fold * 2^e                (in place; the head weights from weights_proj)
// q is read only, at its own token stride: the columns of the fused q_b + wq_b output
// (model/fused_projections.h) or wq_b's dense output. Edge rules are rope's: a position outside
// the table is OutOfRange in checked mode and leaves the head unrotated otherwise.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

struct IndexerQueryParams {
  const bf16* q = nullptr;     // [T, H_i, 128] bf16, heads 128 apart, tokens q_token_stride apart
  int64_t q_token_stride = 0;  // >= H_i * 128
  uint8_t* q8 = nullptr;       // [T, H_i, 128] e4m3 codes, dense
  float* w = nullptr;          // [T, H_i] fp32 head weights, scaled in place
  int32_t num_tokens = 0;      // T
  int32_t num_heads = 0;       // H_i >= 1
  float fold = 0.f;            // H_i^-1/2 * D_i^-1/2 (IndexerQuantParams::fold), finite, > 0
  RopeStyle style = RopeStyle::kNonInterleaved;
  const int32_t* positions = nullptr;  // [T]
  const float* cos = nullptr;          // [T_rope, 32]
  const float* sin = nullptr;          // [T_rope, 32]
  int32_t num_positions = 0;           // T_rope >= 1
};

// InvalidArgument naming the field: T >= 0, H_i >= 1, q_token_stride >= H_i * 128, T * H_i <=
// INT32_MAX, fold finite and > 0, style; when T > 0 also T_rope >= 1, pointers, and q8 and w
// overlapping neither q's byte range (first head to last token's last head) nor each other.
// T == 0 is OK and does nothing (as rope, whose table is then never read).
Status validate(const IndexerQueryParams& p);

// CPU reference: the heads copied to a dense buffer, then rope_ref, hadamard_ref and
// indexer_q_quant_ref, so the CPU model is bit-identical with or without this op.
Status indexer_query_ref(const IndexerQueryParams& p);

// CUDA backend: one warp per (token, head); bit-identical to rope_cuda, hadamard_cuda and
// indexer_q_quant_cuda run on the copied heads. Like that sequence it may differ from the CPU
// reference where hadamard_cuda rounds 1 bf16 ulp from hadamard_ref (class T): then a code by one
// e4m3 step, or the scale by a factor 2 where the amax sits at a power of two
// (check_indexer_query bounds it; about one head in 60,000 on random data).
Status indexer_query_cuda(const IndexerQueryParams& p);

}  // namespace dsa::kernels
