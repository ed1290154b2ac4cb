// `dsa check` entry for the fused indexer query op (SPEC.md §8.5). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/indexer_query/indexer_query.h"

namespace dsa::kernels {

using IndexerQueryFn = Status (*)(const IndexerQueryParams&);

// Runs `op` in both rope styles on `tokens` x `heads` random query heads laid out as the fused
// q_b linear writes them (rows wider than the heads: other columns before and after, holding
// large random sentinels), head scales spread over 2^-8..2^8 with one all-zero head, random
// positions in a 4096-row table of RopeConfig{}, random head weights (q8 poisoned 0xEE), and
// compares with the composition of the separate CPU references (the heads copied, rope_ref,
// hadamard_ref, indexer_q_quant_ref). Since hadamard_cuda may be 1 bf16 ulp from hadamard_ref
// (class T), the comparison allows what one ulp of the Hadamard output can do, no more:
//   * each weight is exactly w * fold * 2^e for the scale exponent e it implies, and e is the
//     reference's, or its neighbour where the amax within one bf16 ulp of the reference's amax
//     crosses a power of two;
//   * each dequantised value code * 2^e is within one bf16 ulp of the reference's Hadamard output
//     r plus half an e4m3 step at each of the two scales (in the binade of |r|, resp. |r| + ulp)
//     of the reference's code * 2^e_ref: rounding to nearest moves a value by at most half the
//     step of the binade it starts in. So a code one step off can pass, two steps cannot.
// An op bit-identical to the references passes a fortiori (the CPU test asserts that directly).
// q must be unchanged. OK on pass; the first mismatch otherwise.
Status check_indexer_query(IndexerQueryFn op, int32_t tokens, int32_t heads, uint64_t seed);

}  // namespace dsa::kernels
