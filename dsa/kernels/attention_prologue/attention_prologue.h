// The attention's row transforms between its first projections and their consumers (SPEC.md
// §8.4, §8.5 steps 2-3), in one launch where they were six. For each token t:
//   cq[t]       = rmsnorm(qa[t]) * q_a_norm_w                      (q_b's input, §8.4)
//   latent[t]   = [rmsnorm(c) * kv_a_norm_w | rope_interleaved(k_pe)], in place  (the new cache
//                 row before its write, §8.4: c its first 512 values, k_pe the last 64)
//   k[t]        = hadamard(rope_style(layernorm(k_raw[t]) * k_norm_w + k_norm_b))  (the
//                 indexer's new key before its write, §8.5; the rope on its first 64 values)
// with the forward's positions and rope tables. The three inputs are the column ranges of the
// fused q_a + wk + kv_a linear (model/fused_projections.h) or three linears' outputs: each has its
// own row stride. Each part is exactly the op it replaces (rmsnorm, rope, layernorm, hadamard):
// same math, same edge rules (a position outside the table: OutOfRange in checked mode, the row
// left unrotated otherwise), so the fused and unfused forwards agree bit for bit.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

struct AttentionPrologueParams {
  int32_t num_tokens = 0;  // T

  // q_a's output -> cq (dense [T, q_lora]; must not overlap qa).
  const bf16* qa = nullptr;          // [T, q_lora], rows qa_ld apart
  int64_t qa_ld = 0;                 // >= q_lora
  const bf16* q_a_norm_w = nullptr;  // [q_lora] bf16
  bf16* cq = nullptr;                // [T, q_lora] dense
  int32_t q_lora = 0;                // >= 1

  // The new latent rows [c (512) | k_pe (64)], normalised and roped in place.
  bf16* latent = nullptr;             // [T, 576], rows latent_ld apart
  int64_t latent_ld = 0;              // >= 576
  const bf16* kv_a_norm_w = nullptr;  // [512] bf16

  // The indexer's key: k_raw (read only) -> k (dense [T, 128]; must not overlap k_raw).
  const bf16* k_raw = nullptr;                              // [T, 128], rows k_raw_ld apart
  int64_t k_raw_ld = 0;                                     // >= 128
  const float* k_norm_w = nullptr;                          // [128] fp32 (LayerNormParams::weight)
  const float* k_norm_b = nullptr;                          // [128] fp32
  bf16* k = nullptr;                                        // [T, 128] dense
  RopeStyle index_rope_style = RopeStyle::kNonInterleaved;  // the latent's is kInterleaved

  // Shared by the two rotations (RopeParams' fields of the same names).
  const int32_t* positions = nullptr;  // [T]
  const float* cos = nullptr;          // [T_rope, 32]
  const float* sin = nullptr;          // [T_rope, 32]
  int32_t num_positions = 0;           // T_rope >= 1

  float rms_eps = 1e-6f;        // rms_norm_eps (both RMSNorms)
  float layernorm_eps = 1e-6f;  // k_norm's
};

// InvalidArgument naming the field: T >= 0, q_lora >= 1, row strides >= their widths, the index
// RoPE style, eps finite and > 0; with T > 0 also T_rope >= 1, pointers, and cq and k each a
// buffer of its own (overlapping neither each other nor the rows of qa, k_raw or latent, which
// the CUDA kernel's other blocks read while these are written). qa, k_raw and latent may be
// column ranges of one buffer (the fused linear's rows interleave them); that their columns do not
// overlap is the caller's to ensure (not checked).
Status validate(const AttentionPrologueParams& p);

// CPU reference: rmsnorm_ref, rope_ref, layernorm_ref and hadamard_ref in the unfused order, so
// the CPU model is bit-identical with the prologue fused or not.
Status attention_prologue_ref(const AttentionPrologueParams& p);

// CUDA backend: one launch, a block per (token, part); bit-identical to rmsnorm_cuda, rope_cuda,
// layernorm_cuda and hadamard_cuda run in that order. Where rmsnorm_cuda would not take both
// norms on its vector path with one vector per thread (q_lora % 8, qa_ld % 8, latent_ld % 8, qa,
// cq, latent and the two weights 16-byte aligned, q_lora <= 2048), those six ops run in sequence
// instead. Checked mode: a position outside the table is OutOfRange (device error word).
Status attention_prologue_cuda(const AttentionPrologueParams& p);
// Whether attention_prologue_cuda runs `p` (valid) as its one fused launch; false: the fallback.
bool attention_prologue_cuda_fuses(const AttentionPrologueParams& p);

}  // namespace dsa::kernels
