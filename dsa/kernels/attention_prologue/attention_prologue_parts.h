// The six unfused ops that attention_prologue replaces, as their own params, in their order: the
// CPU reference runs them through the *_ref ops and the CUDA launcher's fallback through the
// *_cuda ops, so both are the unfused sequence by construction. Internal to the op (its tests
// build the sequence themselves, independently).
#pragma once

#include "dsa/kernels/attention_prologue/attention_prologue.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

struct AttentionPrologueParts {
  RmsNormParams q_norm;       // qa -> cq
  RmsNormParams latent_norm;  // latent[:, 0:512], in place
  RopeParams latent_rope;     // latent[:, 512:576], interleaved, in place
  LayerNormParams k_norm;     // k_raw -> k
  RopeParams k_rope;          // k[:, 0:64], index_rope_style, in place
  HadamardParams k_hadamard;  // k, in place
};

// Requires validate(p).ok().
AttentionPrologueParts attention_prologue_parts(const AttentionPrologueParams& p);

}  // namespace dsa::kernels
