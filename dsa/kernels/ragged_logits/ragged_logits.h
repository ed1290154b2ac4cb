// Ragged MQA logits (SPEC.md §3d), EXTEND's ragged path: each query token t scores the gathered
// keys [ks[t], ke[t]) of its request (§3h), written in the compressed layout where column j is
// the key at ks[t] + j, i.e. position j of the row's request: the same column meaning and the
// same function as paged logits (§3b).
#pragma once

#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::kernels {

struct RaggedLogitsParams {
  const uint8_t* q = nullptr;     // [T, H_i, D_i] e4m3 codes
  const float* w = nullptr;       // [T, H_i] fp32 head weights, q scale folded in
  const uint8_t* k8 = nullptr;    // [S, D_i] e4m3 codes: keys gathered by §3h
  const float* kscale = nullptr;  // [S] fp32 key scales
  const int32_t* ks = nullptr;    // [T] int32 first key of row t (= cu_kv[b])
  const int32_t* ke = nullptr;    // [T] int32 end of row t's keys (ks + row_len)
  int32_t num_tokens = 0;         // T
  int32_t num_keys = 0;           // S
  int32_t num_heads = 64;         // H_i in {16, 32, 64}
  int32_t head_dim = 128;         // D_i, must be 128
  float* logits = nullptr;        // [T, logits_ld] fp32 out, column j = key ks[t] + j
  int64_t logits_ld = 0;          // >= max_t (ke - ks) (checked), multiple of 4
  int64_t workspace_bytes = 0;    // configured size of the logits workspace
};

// Host checks: T >= 0, S >= 0, H_i in {16, 32, 64}, D_i = 128, ld >= 0 and ld mod 4 = 0, pointers
// (InvalidArgument); T ld 4 bytes beyond workspace_bytes is ResourceExhausted (callers chunk
// queries before calling).
Status validate(const RaggedLogitsParams& p);

// CPU reference. Checked: 0 <= ks <= ke <= S and ke - ks <= ld for every row (OutOfRange, nothing
// written); columns [ke - ks, ld) are poisoned with NaN. Unchecked: ks is clamped into [0, S] and
// ke into [ks, min(S, ks + ld)]; columns past the row are left untouched. Columns
// [0, ke - ks) get kscale[c] * sum_h w relu(q . k8[c]), c = ks + j, in double, rounded once.
Status ragged_logits_ref(const RaggedLogitsParams& p);

// CUDA implementation (sm_90a, params hold device pointers; launches on cuda::current_stream()).
// Host checks as validate() plus 16-byte aligned q, w, k8 (InvalidArgument). Checked mode checks
// ks / ke on the device and returns the error word's Status (OutOfRange, synchronising);
// unchecked mode clamps as the reference does. Columns past each row are left untouched.
Status ragged_logits_cuda(const RaggedLogitsParams& p);

// Fills bound [T, ld] with the §3b/§3d tolerance 2^-8 M[t, j] for defined columns, 0 elsewhere
// (for GPU tests). Runs validate() only; assumes in-contract ks/ke.
Status ragged_logits_bounds(const RaggedLogitsParams& p, float* bound);

}  // namespace dsa::kernels
