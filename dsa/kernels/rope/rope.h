// Rotary position embedding with YaRN (SPEC.md §8.3): the host-built cos/sin tables (class E),
// the attention softmax scale, and the application to the 64 rope dims of q/k rows (class T).
#pragma once

#include <array>
#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

inline constexpr int32_t kRopePairs = 32;  // D_r / 2: one frequency per rotated pair

// config.json's rope_theta and rope_scaling (yarn); defaults are V3.2's (and the tiny model's).
struct RopeConfig {
  double theta = 10000.0;                // rope_theta (base)
  double factor = 40.0;                  // rope_scaling.factor
  int32_t original_max_position = 4096;  // rope_scaling.original_max_position_embeddings (L0)
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // cos/sin are scaled by mscale(factor, mscale) / mscale(factor, mscale_all_dim); dsa supports
  // only the configs where that ratio is 1 (§8.3: "cos/sin are not rescaled").
  double mscale = 1.0;
  double mscale_all_dim = 1.0;
};

// InvalidArgument: theta > 1, factor >= 1, L0 >= 1, beta_fast > beta_slow > 0 (all finite),
// mscale == mscale_all_dim.
Status validate(const RopeConfig& c);

// YaRN's correction range over the 32 pairs: low = max(floor(c(beta_fast)), 0),
// high = min(ceil(c(beta_slow)), 63), high += 0.001 if equal. V3.2: low = 10, high = 23.
struct YarnRange {
  double low;
  double high;
};
YarnRange yarn_range(const RopeConfig& c);  // requires validate(c).ok()

// theta'_i = theta_i (1 - ramp_i) + (theta_i / factor) ramp_i, in fp64, rounded to fp32; factor 1
// (plain RoPE) gives theta_i = theta^(-2i/64) exactly.
std::array<float, kRopePairs> rope_inv_freq(const RopeConfig& c);  // requires validate(c).ok()

// sm_scale = (qk_nope + qk_rope)^-1/2 * m^2, m = 0.1 * mscale_all_dim * ln(factor) + 1 when
// factor > 1, else 1. V3.2 (128 + 64): 0.1352338; tiny (64 + 64): 0.1656269.
float softmax_scale(const RopeConfig& c, int32_t qk_nope_head_dim, int32_t qk_rope_head_dim);

struct RopeTableParams {
  RopeConfig config;
  int32_t num_positions = 0;  // T_rope >= max_ctx + (F + 2)(d + 1) (§6.7); may exceed 163840
  float* cos = nullptr;       // [T_rope, 32] fp32, written
  float* sin = nullptr;       // [T_rope, 32] fp32, written
};

// InvalidArgument: the config, T_rope >= 0, pointers.
Status validate(const RopeTableParams& p);

// Host only, class E: angle = fp32(pos) * theta'_i in fp32 (one rounding); cos/sin of that fp32
// angle in fp64, rounded to fp32. The device never recomputes the tables; it reads these.
Status rope_table_ref(const RopeTableParams& p);

enum class RopeStyle {
  kInterleaved,     // pairs (x[2i], x[2i+1]): MLA q_pe and k_pe
  kNonInterleaved,  // pairs (x[i], x[i+32]): the V3.2 indexer (indexer_rope_interleave false)
};

// Rotates the 64 rope values of every (token t, head h), in place or (y set) into y: they start at
// x + t * token_stride + h * head_stride. Row layouts are token-major, e.g. q_pe inside q
// [T, H, 192] is x = q + 128, head_stride 192, token_stride H * 192.
struct RopeParams {
  bf16* x = nullptr;                   // [T, H, >= 64] bf16 (strided), rotated in place unless y
  const int32_t* positions = nullptr;  // [T] int32 position of each token
  const float* cos = nullptr;          // [T_rope, 32] fp32 table from rope_table_ref
  const float* sin = nullptr;          // [T_rope, 32] fp32
  int32_t num_tokens = 0;              // T
  int32_t num_heads = 1;               // H
  int64_t token_stride = 0;            // elements between tokens, >= (H - 1) * head_stride + 64
  int64_t head_stride = 0;             // elements between heads, >= 64 when H > 1
  int32_t num_positions = 0;           // T_rope: rows of the tables
  RopeStyle style = RopeStyle::kInterleaved;
  // Out of place when set: x is only read, and (t, h)'s 64 rotated values go to
  // y + t * y_token_stride + h * y_head_stride (same layout rules as x's strides; y must not
  // overlap x). A token left unrotated (unchecked, position outside the table) is copied as it is.
  // So the absorbed MLA query takes q_pe straight from q_b's output (model/mla_attention.cc).
  bf16* y = nullptr;
  int64_t y_token_stride = 0;
  int64_t y_head_stride = 0;
};

// InvalidArgument: T >= 0, H >= 1, strides (y's too when set), y != x (in place is y null),
// T_rope >= 1, pointers.
Status validate(const RopeParams& p);

// CPU reference, fp32 math on bf16 inputs: a' = a cos - b sin, b' = a sin + b cos, rounded to
// bf16. Checked mode: a position outside [0, T_rope) is OutOfRange (nothing is written).
// Unchecked: such a token is left unrotated (the table is never read out of bounds).
Status rope_ref(const RopeParams& p);
// CUDA backend (device pointers, tables uploaded from rope_table_ref; never recomputed).
Status rope_cuda(const RopeParams& p);

}  // namespace dsa::kernels
