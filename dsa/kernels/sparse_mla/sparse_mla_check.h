// `dsa check sparse_mla_decode|sparse_mla_prefill`: runs the reference at a shape on random
// inputs and compares it with dense softmax attention over the same tokens
// (sparse_mla_dense_check.h).
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"

namespace dsa::kernels {

// `rows` verify-style rows of one request of `context_len` tokens in a randomly paged pool:
// row r sees max(context_len - (rows - 1 - r), 0) positions, all of them when that is <= topk,
// else a random topk-subset (dense attention then runs over that subset). Index lists are
// shuffled, -1-padded, with topk_len = min(row_len, topk). OK on agreement; InvalidArgument for
// a bad shape; Internal naming the first mismatch otherwise. At heads 128, topk 2048 one row
// costs about 0.3 s on one core.
using SparseMlaDecodeFn = Status (*)(const SparseMlaDecodeParams&);
using SparseMlaPrefillFn = Status (*)(const SparseMlaPrefillParams&);

Status check_sparse_mla_decode(SparseMlaDecodeFn op, int32_t rows, int32_t heads, int32_t topk,
                               int32_t context_len, LatentFormat format, uint64_t seed);

// `tokens` new tokens of one request after a random cached prefix (causal: token t sees
// positions [0, cached + t]). Runs source 1 (flat bf16 pool, global slots) and source 2
// (gathered rows, local indices), requires them bit-identical, and compares with dense causal
// attention (over the selected subset for rows longer than topk), max_logit included. Cost is
// about 3 * tokens * heads * min(topk, row_len) * 1088 double multiply-adds: at heads 128,
// topk 2048 keep tokens to a handful (300 tokens take ~100 s on 2 cores).
Status check_sparse_mla_prefill(SparseMlaPrefillFn op, int32_t tokens, int32_t heads, int32_t topk,
                                uint64_t seed);

}  // namespace dsa::kernels
