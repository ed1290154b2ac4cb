// Acceptance of top-1 drafts over a batch of TARGET_VERIFY rows (SPEC.md §6.1-§6.3), as an op, so
// that on the device only the accepted counts and the emitted tokens (a few bytes per request)
// leave it. Per request b with d drafts g_1..g_d and verify rows j = 0..d, row j predicts the
// absolute position P_b + j (P_b = first_position[b], + shift_accepted[b] when given), where the
// target samples y_j = sample_token(row j, params of b, P_b + j) (dsa/kernels/sampling/sampler.h:
// argmax at temperature 0, position-keyed Gumbel-max after temperature / top-k / top-p otherwise).
// g_{j+1} is accepted iff y_j is a token (not kNoToken) and equals it, for j = 0.. until the first
// mismatch; with a accepted the request emits g_1..g_a and then y_a (the correction, or the bonus
// when a = d). This is the engine's host rule (dsa/engine/acceptance.h) for every request at once.
#pragma once

#include <cstdint>

#include "dsa/core/host_device.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct AcceptanceParams {
  // [B * (d + 1), row_stride] fp32; request b's row j at b * (d + 1) + j; only the first V
  // columns are read.
  const float* logits = nullptr;
  int32_t requests = 0;            // B
  int32_t drafts_per_request = 0;  // d >= 0 (d = 0: plain sampling, a = 0, one emitted token)
  int32_t vocab = 0;               // V, the tokens that may be sampled
  // Elements between rows, >= V; 0 = V. A padded LM head (more rows than the tokenizer has ids)
  // passes its width here and the tokenizer's size as V: the same tokens as masking the padding
  // columns to -inf, since -inf is never eligible and the noise is keyed by the token id.
  int64_t row_stride = 0;
  const int32_t* drafts = nullptr;  // [B, d] g_1..g_d (any int32; out-of-vocabulary ids reject)
  // [B] per-request sampling params (SamplingParams' fields).
  const float* temperature = nullptr;  // 0 = greedy; else finite and > 0
  const float* top_p = nullptr;        // in (0, 1]; 1 = off
  const int32_t* top_k = nullptr;      // >= 0; 0 = off
  const uint64_t* seed = nullptr;      // the request's 64-bit Philox key
  // [B] C + 1, the position row 0 predicts (before the shift below, when given); P_b >= 0 and
  // P_b + d <= 2^31 - 1.
  const int32_t* first_position = nullptr;
  // Optional, both or neither: the drafts where the MTP chain left them on the backend, so no
  // gather runs first. With draft_index set, draft j + 1 of request b is
  // draft_slots[draft_index[b d + j]] where that entry is >= 0, drafts[b d + j] where it is -1;
  // an entry must be in [-1, draft_index_bound).
  const int32_t* draft_slots = nullptr;  // [draft_index_bound]
  const int32_t* draft_index = nullptr;  // [B, d]
  int32_t draft_index_bound = 0;
  // Optional: [B] the accepted counts of the speculative step still in flight (SPEC.md §6.7's
  // shift), each in [0, d]: request b's first position is first_position[b] + shift_accepted[b].
  const int32_t* shift_accepted = nullptr;
  // Every row greedy whatever the params say: the MTP chain's drafts (SPEC.md §6.1), plain
  // decoding and the verify where every request is greedy; y_j = row j's argmax (kNoToken when no
  // entry is eligible), at any d, counted against the drafts as above. The sampling params,
  // first_position and shift_accepted are not read (positions matter only to sampled rows): the
  // first two may be null, shift_accepted may be set and is ignored (its range is not checked).
  // drafts and draft_slots / draft_index are read as without it. The CUDA backend then runs a
  // kernel of the greedy scan alone, with a few hundred bytes of shared memory instead of the
  // sampler's 34 KB.
  bool greedy = false;
  int32_t* accepted = nullptr;  // [B] out: a in [0, d]
  // [B, d + 1] out: g_1..g_a, y_a, then kNoToken (-1) for the d - a unused entries. y_a itself is
  // kNoToken only when its row has no eligible token (all NaN / -inf).
  int32_t* emitted = nullptr;
};

// Host checks (InvalidArgument naming the field and value): B >= 0, d >= 0, V >= 1,
// row_stride 0 or >= V, B * (d + 1) <= 2^31 - 1, every pointer non-null when B > 0 (the sampling
// params and first_position only without `greedy`, at any d), draft_slots and draft_index both
// set or both null, draft_index_bound >= 1 with them.
Status validate(const AcceptanceParams& p);

// CPU reference: per request the host rule above, reading no row past the first mismatch.
// InvalidArgument (naming the request and field) when a request's sampling params fail validate(),
// its shift leaves [0, d], its positions leave [0, 2^31 - 1] or a draft index leaves
// [-1, draft_index_bound); requests before it are written. With `greedy` only the draft index:
// the params, positions and shift are not read (a caller that skips them checks the params and
// positions itself: model/backend_acceptance.h's validate_greedy_call).
Status accept_drafts_ref(const AcceptanceParams& p);

// Draft j + 1 of one request, written once for the reference and the kernel: drafts, index (or
// null) point at the request's d entries; an index entry must pass draft_index_ok first.
DSA_HD bool draft_index_ok(int32_t at, int32_t bound) { return at >= -1 && at < bound; }
DSA_HD int32_t request_draft(const int32_t* drafts, const int32_t* index, const int32_t* slots,
                             int32_t j) {
  return index != nullptr && index[j] >= 0 ? slots[index[j]] : drafts[j];
}

// The most drafts per request the CUDA backend counts inside the sampling launch: the d + 1 CTAs
// of a request form one cluster (at most 8, the portable cluster size).
inline constexpr int32_t kAcceptClusterMaxDrafts = 7;

// CUDA backend (device pointers): every verify row sampled by one CTA with the sampling op's row
// sampler (kernels/common/sample_row.cuh); up to kAcceptClusterMaxDrafts drafts the d + 1 CTAs of
// a request are one cluster and its first CTA counts the accepted drafts after the cluster
// barrier: one launch per call. Above it a second launch counts. No host
// synchronisation, graph-capturable. The same tokens as the reference, up to the sampling op's
// near-ties (sampling.h: device and host fp64 log / exp may differ in the last bit). A request
// with bad params gets a = 0 and every emitted entry -1 and, in checked mode, the call returns
// InvalidArgument from the device error word (row = the request, value = 1 temperature, 2 top_p,
// 3 top_k, 4 positions, 5 shift_accepted, 6 a draft index). With `greedy` the CTAs run the argmax
// alone (the same clusters and count launch; only value 6 can be reported), bit-exact with the
// reference: an argmax has no near-ties.
Status accept_drafts_cuda(const AcceptanceParams& p);

}  // namespace dsa::kernels
