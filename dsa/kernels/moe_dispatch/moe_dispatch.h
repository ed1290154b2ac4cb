// MoE dispatch without host synchronisation (SPEC.md §8.6: "in graph modes MoE kernels read
// per-expert counts from the device and use a fixed grid sized for the worst case"):
//   moe_group:      routed (row, choice) slots grouped by expert, on the device: per-expert
//                   offsets and, per pair, its input row and its slot. Expert-major; within an
//                   expert, ascending slot (deterministic and batch-invariant).
//   grouped_linear: y[y_row[i]] = bf16(x[x_row[i]] W_g^T) for every pair i of group g (bf16
//                   operands, fp32-or-wider accumulation, one RNE rounding).
// Together: expert ids -> moe_group -> grouped_linear(x_row = pair_row, y_row = pair_slot), with
// capacity = rows * k fixing every launch, so the whole MoE can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

// moe_group_cuda's most experts (its shared-memory counters); the CPU reference has no limit.
inline constexpr int32_t kMoeGroupMaxExpertsCuda = 512;

struct MoeGroupParams {
  // [S] int32: slot s = r * k + j is row r's j-th choice; -1 = not dispatched (padded rows).
  const int32_t* expert_ids = nullptr;
  int32_t num_slots = 0;    // S = rows * k: also the capacity of pair_row / pair_slot
  int32_t num_experts = 0;  // E (>= 1)
  int32_t k = 1;            // choices per row (>= 1); slot s belongs to row s / k
  // [E + 1] int32 out: pairs of expert e are [offsets[e], offsets[e+1]); offsets[0] = 0,
  // offsets[E] = dispatched pairs.
  int32_t* offsets = nullptr;
  int32_t* pair_row = nullptr;   // [S] int32 out: pair i's input row (s / k); -1 past offsets[E]
  int32_t* pair_slot = nullptr;  // [S] int32 out: pair i's slot s; -1 past offsets[E]
};

// Host checks (InvalidArgument): S >= 0, E >= 1, k >= 1, S % k == 0, pointers (offsets always;
// the others when S > 0).
Status validate(const MoeGroupParams& p);

// CPU reference: a counting sort. Every output entry is written. Checked mode: an id outside
// [-1, E) is OutOfRange naming expert_ids[s] (nothing written); unchecked: it is treated as -1.
Status moe_group_ref(const MoeGroupParams& p);
// CUDA backend (device pointers): one CTA, a fixed launch that depends only on the params;
// bit-identical to the reference. Checked mode reports the lowest bad slot through the device
// error word (index s, value id).
Status moe_group_cuda(const MoeGroupParams& p);

struct GroupedLinearParams {
  const bf16* x = nullptr;         // [x_rows, in] bf16 row-major
  int32_t x_rows = 0;              // rows of x
  const int32_t* x_row = nullptr;  // [capacity] int32: the x row pair i reads; nullptr = row i
  // The weights, in exactly one of two forms (the same op rather than a sibling: the dispatch,
  // offsets, row rules and CUDA grid are identical, only the per-group GEMM differs, as with
  // LinearParams' two weight forms). Pointer arrays live in backend memory; CUDA: each W_g
  // 16-byte aligned (cudaMalloc gives 256).
  //   bf16: weights[g] -> W_g [out, in] bf16 row-major.
  //   FP8 (SPEC.md §8.8): weights_fp8[g] -> W8_g [out, in] e4m3 codes row-major and
  //   weight_scales[g] -> its [ceil(out/128), ceil(in/128)] fp32 block scales (scale_inv).
  const bf16* const* weights = nullptr;
  const uint8_t* const* weights_fp8 = nullptr;
  const float* const* weight_scales = nullptr;
  // FP8, CUDA only: device scratch of at least grouped_linear_scratch_bytes(*this) bytes (the
  // quantised x rows), 256-byte aligned; passed in (the model's workspace) so the call never
  // allocates and can be captured in a graph. The CPU reference ignores it.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  // [G + 1] int32 (backend memory): pairs of group g are [offsets[g], offsets[g+1]).
  const int32_t* offsets = nullptr;
  int32_t num_groups = 0;  // G (>= 1)
  int32_t capacity = 0;    // the most pairs: fixes the CUDA grid; offsets[G] <= capacity
  // The most pairs one group can hold, where the caller knows it (the MoE: its rows, since a row
  // picks an expert at most once); 0 = capacity. A hint for the CUDA FP8 tile's width only: the
  // grid covers any split of the offsets whatever the width, so the result never depends on it.
  int32_t max_group_pairs = 0;
  int32_t in_features = 0;
  int32_t out_features = 0;
  bf16* y = nullptr;               // [y_rows, out] bf16 row-major; rows no pair writes untouched
  int32_t y_rows = 0;              // rows of y
  const int32_t* y_row = nullptr;  // [capacity] int32: the y row pair i writes; nullptr = row i
  // Optional second projection of the same pairs (FP8 only; the MoE's gate and up): W8b_g with
  // its scales, same [out, in] shape, written to y_b through the same y_row. Exactly two calls'
  // results (y as without it, y_b as a call with weights_fp8_b), but CUDA runs both in one
  // launch over x quantised once: twice the CTAs streaming weights at once at decode, where one
  // projection of 8 experts is too few CTAs for the bandwidth.
  const uint8_t* const* weights_fp8_b = nullptr;
  const float* const* weight_scales_b = nullptr;
  bf16* y_b = nullptr;
};

// Host checks (InvalidArgument): exactly one of weights / weights_fp8 set, weight_scales set
// with (and only with) weights_fp8, offsets set, G >= 1, capacity >= 0, in >= 1 and in % 8 == 0
// (bf16) or in % 16 == 0 (FP8; the CUDA kernels' 16-byte loads), out >= 1, x_rows >= 0,
// y_rows >= 0, max_group_pairs >= 0, x set when x_rows > 0, y set when y_rows > 0; the second
// projection's three fields all set or all null, and only with FP8 weights.
Status validate(const GroupedLinearParams& p);

// p's second projection as a call of its own (weights_fp8_b, weight_scales_b -> y_b), without
// one: what the paired form must equal.
GroupedLinearParams second_projection(const GroupedLinearParams& p);

// Bytes of CUDA scratch the FP8 form needs: x8 [x_rows, in] e4m3 then sx [x_rows, ceil(in/128)]
// fp32, each 256-byte aligned; 0 for bf16 weights.
size_t grouped_linear_scratch_bytes(const GroupedLinearParams& p);

// Checked mode (device data, OutOfRange naming the array, index and value): offsets[0] == 0,
// offsets non-decreasing, offsets[G] <= capacity, and for every pair i < offsets[G]:
// x_row[i] in [0, x_rows), y_row[i] in [0, y_rows); W_g of a group with pairs non-null (CUDA:
// and 16-byte aligned; FP8: its scales non-null too, named weight_scales[g]). FP8 (§2.1, §8.8):
// the x rows of dispatched pairs and the block scales of groups with pairs finite, else
// OutOfRange naming x[row][col] or weight_scales[g][block]. Unchecked: the offsets used are
// eff[g] = min(capacity, max(0, offsets[0..g])) (clamped into [0, capacity] and made
// non-decreasing), a pair with an out-of-range row index is skipped (no write), and so is a
// group whose W_g (FP8: or its scales) is null (CUDA: or misaligned). The y rows of the
// dispatched pairs should be distinct; where two pairs share one, which of them lands is
// unspecified.
//
// CPU reference: each group's rows are gathered and run through linear_ref (its bf16 or FP8
// weight path), so every output row is bit-identical to linear_ref on that x row and W_g.
Status grouped_linear_ref(const GroupedLinearParams& p);
// CUDA backend (device pointers): bf16 tensor cores with fp32 accumulation, one RNE rounding; a
// fixed grid of (ceil(capacity / 64) + G) x ceil(out / 64) CTAs, each finding its group on the
// device. x must be 16-byte aligned. A misaligned W_g is OutOfRange (index g) in checked mode and
// its group is skipped in either mode.
// FP8: one quantiser launch over the x rows into `scratch` (§2.1, bit-identical to the
// reference's), then a fixed grid of (m + (capacity - m) / N) x ceil(ceil(out / 64) / R) CTAs,
// m = min(G, capacity), twice that along y for the paired form (N = 8..64 pairs per tile from
// capacity, G and max_group_pairs; R = 1 or 2 row tiles per CTA at N = 8), running wgmma e4m3 on
// [64 outputs, N pairs] tiles, the block scales applied at the fp32 promotion of every 128-wide K
// block (grouped_linear_fp8_kernel.cuh). Class T (§8.8).
Status grouped_linear_cuda(const GroupedLinearParams& p);

}  // namespace dsa::kernels
