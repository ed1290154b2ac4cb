// `dsa check` entry for the attention prologue (SPEC.md §8.4, §8.5 steps 2-3), and the random
// inputs it (and the op's tests) run on. No gtest dependency.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/attention_prologue/attention_prologue.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

using AttentionPrologueFn = Status (*)(const AttentionPrologueParams&);

// Random inputs laid out as the fused q_a + wk + kv_a linear writes them (model/
// fused_projections.h): T rows of [qa (q_lora) | k_raw (128) | latent (576)], ld = q_lora + 704
// apart. Row scales spread over 2^-6..2^6 (k_raw's rows also offset, as LayerNorm inputs are),
// bf16 norm weights around 0.5, k_norm's fp32 weight and bias, positions over the whole table
// (its first and last row among them) and the tables of RopeConfig{} from rope_table_ref. From
// 4 tokens on, rows 0-3 hold edge rows: a zero qa row, a zero latent c, a constant k_raw row, a qa
// row of 2^50s.
struct AttentionPrologueInputs {
  int32_t tokens = 0;
  int32_t q_lora = 0;
  int64_t ld = 0;
  std::vector<bf16> rows;  // [T, ld]
  std::vector<bf16> q_a_norm_w, kv_a_norm_w;
  std::vector<float> k_norm_w, k_norm_b;
  std::vector<int32_t> positions;
  int32_t num_positions = 0;
  std::vector<float> cos, sin;  // [num_positions, 32]

  int64_t qa_col() const { return 0; }
  int64_t k_raw_col() const { return q_lora; }
  int64_t latent_col() const { return int64_t{q_lora} + 128; }
};

// One backend's four constituent ops (the *_ref or the *_cuda functions).
struct PrologueConstituents {
  Status (*rmsnorm)(const RmsNormParams&);
  Status (*rope)(const RopeParams&);
  Status (*layernorm)(const LayerNormParams&);
  Status (*hadamard)(const HadamardParams&);
};

// The six separate ops attention_prologue replaces, one by one on the buffers `p` names, their
// params written out here (not through the op's own attention_prologue_parts): the independent
// sequence the op's tests compare it with.
Status run_prologue_separately(const AttentionPrologueParams& p, const PrologueConstituents& ops);

StatusOr<AttentionPrologueInputs> attention_prologue_inputs(int32_t tokens, int32_t q_lora,
                                                            uint64_t seed);

// Runs `op` in both index RoPE styles on attention_prologue_inputs (host buffers; cq and k
// NaN-poisoned with a poisoned tail past their last row) and compares with the constituent CPU
// references (rmsnorm_ref, rope_ref, layernorm_ref, hadamard_ref) run one by one on separate
// dense copies of the three inputs: attention_prologue_ref must match them bit for bit; any other
// op within 1 bf16 ulp, the constituents' class-T allowance (their own checks compare them with
// independent formulations). qa and k_raw must stay untouched, and nothing past cq's and k's
// rows may be written. OK on pass; the first mismatch otherwise.
Status check_attention_prologue(AttentionPrologueFn op, int32_t tokens, int32_t q_lora,
                                uint64_t seed);

}  // namespace dsa::kernels
