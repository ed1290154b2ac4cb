// `dsa check` entries for MoE dispatch (SPEC.md §8.6), and the independent formulations the
// tests share. No gtest dependency.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

using MoeGroupFn = Status (*)(const MoeGroupParams&);
using GroupedLinearFn = Status (*)(const GroupedLinearParams&);

// [rows, k] ids as the router makes them: each row picks k distinct experts of [0, experts) in
// random order; every `pad_every`-th row (0 = none) is padded (all -1). Needs k <= experts.
std::vector<int32_t> random_expert_ids(testing::Rng& rng, int32_t rows, int32_t experts, int32_t k,
                                       int32_t pad_every);

// The grouping by a different route than the counting sort: the dispatched slots stable-sorted
// by expert; offsets by binary search. Ids outside [0, experts) are not dispatched.
struct Grouping {
  std::vector<int32_t> offsets;    // [E + 1]
  std::vector<int32_t> pair_row;   // [S], -1 past offsets[E]
  std::vector<int32_t> pair_slot;  // [S], -1 past offsets[E]
};
Grouping expected_grouping(const std::vector<int32_t>& ids, int32_t experts, int32_t k);

// Runs `op` on random_expert_ids(rows, experts, k, pad_every = 5) with outputs poisoned
// (0x7FFFFFFF) and compares every output entry with expected_grouping. Exact.
Status check_moe_group(MoeGroupFn op, int32_t rows, int32_t experts, int32_t k, uint64_t seed);

// Runs `op` as the MoE does: x [rows, in], a random dispatch (as above) grouped by
// expected_grouping, x_row = pair_row, y [rows * k, out] with y_row = pair_slot, capacity =
// rows * k, and NaN-poisoned y. W_g ~ N(0, in^-1/2), one of 8 distinct matrices per group (so the
// V3.2 shape fits in memory). Expected: transposed loops in long double; every written element
// within 1 bf16 ulp of it, every slot of a padded row still poison. OK on pass; the first
// mismatch otherwise. (Another backend is held to a looser bound; this is for exact references.)
Status check_grouped_linear(GroupedLinearFn op, int32_t rows, int32_t experts, int32_t k,
                            int32_t in_features, int32_t out_features, uint64_t seed);

// The same MoE-driven run with FP8 block-scaled weights (SPEC.md §8.8): e4m3 codes ~N(0, 100)
// with non-power-of-two block scales ~2^-9, x rows with scales 2^-6..2^6. Expected: the block
// formula y = sum_k sx sw sum_j x8 w8 in long double, with its own §2.1 quantisation of x (the
// exponent from frexp); every written element within 1 bf16 ulp, padded slots still poison.
Status check_grouped_linear_fp8(GroupedLinearFn op, int32_t rows, int32_t experts, int32_t k,
                                int32_t in_features, int32_t out_features, uint64_t seed);

// An FP8 grouped-linear problem on the host (SPEC.md §8.8 weights), shared by the CPU and GPU
// tests and the bench: x [x_rows, in] with per-row scales 2^-6..2^6; `distinct` weights of e4m3
// codes ~N(0, 100) with non-power-of-two block scales ~2^-9, group g using matrix g % distinct
// (so 256 groups of the V3.2 shape fit in memory); group g gets counts[g] pairs, each reading a
// random x row and writing its own y row (a random permutation of [0, y_rows), y_rows = pairs
// + spare), capacity = pairs + spare.
struct Fp8GroupedProblem {
  int32_t in = 0, out = 0, x_rows = 0, y_rows = 0, capacity = 0;
  std::vector<bf16> x;
  std::vector<std::vector<uint8_t>> w8;
  std::vector<std::vector<float>> sw;
  std::vector<const uint8_t*> weights_fp8;  // [G], into w8
  std::vector<const float*> weight_scales;  // [G], into sw
  std::vector<int32_t> offsets, x_row, y_row;
  int32_t groups() const { return static_cast<int32_t>(offsets.size()) - 1; }
  int32_t matrix_of(int32_t g) const { return g % static_cast<int32_t>(w8.size()); }
  // Params over these host vectors; y [y_rows, out] as given.
  GroupedLinearParams params(bf16* y);
};
Fp8GroupedProblem make_fp8_grouped_problem(testing::Rng& rng, const std::vector<int32_t>& counts,
                                           int32_t in, int32_t out, int32_t x_rows, int32_t spare,
                                           int32_t distinct);

// The independent expectation for pair i: linear_ref's FP8 path on x row x_row[i] alone with
// group g's weight (T = 1), [out] bf16; empty if linear_ref failed.
std::vector<bf16> fp8_linear_row(const Fp8GroupedProblem& pr, int32_t g, int32_t i);

}  // namespace dsa::kernels
