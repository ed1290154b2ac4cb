// Token sampling over a batch of logit rows (SPEC.md §6.2, §6.3): per row, greedy argmax at
// temperature 0, else position-keyed Gumbel-max over the temperature-scaled, top-k / top-p filtered
// logits, with the exact rules of dsa/kernels/sampling/sampler.h (the ground truth).
#pragma once

#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::kernels {

struct SamplingOpParams {
  const float* logits = nullptr;  // [R, V] fp32 rows
  int32_t rows = 0;               // R
  int32_t vocab = 0;              // V
  // [R] per-row sampling params and absolute positions (SamplingParams' fields).
  const float* temperature = nullptr;  // 0 = greedy; else finite and > 0
  const float* top_p = nullptr;        // in (0, 1]; 1 = off
  const int32_t* top_k = nullptr;      // >= 0; 0 = off
  const uint64_t* seed = nullptr;      // the request's 64-bit Philox key
  const int32_t* position = nullptr;   // >= 0
  int32_t* out = nullptr;              // [R] sampled token ids (-1 = no eligible token)
};

// Host checks (InvalidArgument): R >= 0, V >= 1, every pointer non-null when R > 0.
Status validate(const SamplingOpParams& p);

// CPU reference: out[r] = sample_token(logits[r], {T, top_p, top_k, seed}, position[r]).
// InvalidArgument (naming the row and field) when a row's params fail validate() or its
// position is negative; rows before it are written.
Status sample_rows_ref(const SamplingOpParams& p);

// CUDA backend (device pointers), one CTA per row. Same tokens as sample_rows_ref, except where
// device and host fp64 log / exp differ in the last bit and the row's top-two perturbed scores are
// that close (a near-tie, SPEC.md §6.3). Per-row params are checked on the device: a bad row (the
// reference's InvalidArgument) gets out = -1 and, in checked mode, the call returns
// InvalidArgument from the device error word (row = the row, value = 1 temperature, 2 top_p,
// 3 top_k, 4 position). Any V: top-k / top-p select by key thresholds over the row in global
// memory, so there is no vocabulary limit.
Status sample_rows_cuda(const SamplingOpParams& p);

}  // namespace dsa::kernels
