// A near-tie inside the model. The noaux_tc router (SPEC.md §8.6) makes discrete choices: which
// groups to keep, which k experts to take. Two backends whose class-T roundings differ can flip a
// choice whose margin is within those roundings, after which the row's output differs by O(1) —
// as legal as a flip at a near-tie of the output logits. probed_cpu_ops() is the CPU backend with
// its routing op wrapped to record the smallest margin it decided by: between the last kept and
// the best dropped group score, and between the k-th chosen and the best unchosen expert score.
#pragma once

#include "dsa/kernels/op_table.h"

namespace dsa::e2e {

// Router decisions with a margin below this count as near-ties (bf16 hidden states carry 2^-8
// relative precision, so the two backends' router scores differ by ~1e-3; flips were seen at
// margins of 4e-4).
constexpr double kRouterTieMargin = 2e-3;

const kernels::OpTable& probed_cpu_ops();
void reset_router_margin();
double router_margin();  // +inf when nothing was routed through probed_cpu_ops() since the reset

}  // namespace dsa::e2e
