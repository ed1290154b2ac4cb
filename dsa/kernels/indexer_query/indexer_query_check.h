// `dsa check` entry for the fused indexer query op (SPEC.md §8.5). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/indexer_query/indexer_query.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

using IndexerQueryFn = Status (*)(const IndexerQueryParams&);

// One backend's constituents of the query side: the copy of p's heads out of their rows (host
// memcpy or a device 2-D copy) and the three ops (the *_ref or the *_cuda functions).
struct QueryConstituents {
  // dense[t] = rows[t * ld, t * ld + width) for t < rows
  Status (*copy_rows)(bf16* dense, const bf16* rows, int64_t ld, int64_t width, int32_t count);
  Status (*rope)(const RopeParams&);
  Status (*hadamard)(const HadamardParams&);
  Status (*quant)(const IndexerQuantParams&);
};

// The four separate steps indexer_query replaces, on `dense` ([T, H_i, 128], the caller's
// buffer), into p.q8 and p.w: the copy, RoPE and Hadamard in place, the quantisation. Their params
// are written out here, independently of the op's own reference: the sequence its tests and
// check compare it with.
Status run_query_separately(const IndexerQueryParams& p, bf16* dense, const QueryConstituents& ops);
// QueryConstituents::copy_rows for host memory.
Status copy_rows_host(bf16* dense, const bf16* rows, int64_t ld, int64_t width, int32_t count);

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
