// Indexer query quantisation (SPEC.md §8.5 steps 4–5), the query side of the indexer write: each
// (token, head) block of 128 Hadamard-rotated query values becomes e4m3 codes with the §2.1
// power-of-two scale, and the head weight takes the fold and that scale, w *= fold * qscale
// (class E), so the logits kernels read FP8 queries and scaled weights from backend memory.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct IndexerQuantParams {
  const bf16* q = nullptr;  // [blocks, 128] bf16 Hadamard-rotated indexer queries
  uint8_t* q8 = nullptr;    // [blocks, 128] e4m3 codes
  float* w = nullptr;       // [blocks] fp32 head weights, in place: w = w * fold * qscale
  int64_t num_blocks = 0;   // T * H_i
  float fold = 0.f;         // H_i^-1/2 * D_i^-1/2
};
Status validate(const IndexerQuantParams& p);
// CPU reference: quantize_block_pow2 per block (class E); CUDA: bit-identical.
Status indexer_q_quant_ref(const IndexerQuantParams& p);
Status indexer_q_quant_cuda(const IndexerQuantParams& p);

}  // namespace dsa::kernels
