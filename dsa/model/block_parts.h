// The parts of a decoder block (decoder_block.cc, mla_attention.cc, ffn.cc); internal to dsa/model.
// Every pointer is backend memory; outputs are written to caller-owned buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/model/decoder_block.h"

namespace dsa::model {

Status block_rmsnorm(const BlockContext& c, const bf16* x, int64_t x_stride,
                     const std::vector<bf16>& w, bf16* y, int32_t rows, int32_t dim,
                     int64_t y_stride = 0);
// The forward's positions and tables for `rows` tokens of `heads` heads; the caller sets x (and y
// for out of place) and the strides.
kernels::RopeParams rope_params(const BlockContext& c, int32_t rows, int32_t heads,
                                kernels::RopeStyle style);
Status block_rope(const BlockContext& c, bf16* x, int32_t rows, int32_t heads, int64_t head_stride,
                  int64_t token_stride, kernels::RopeStyle style);
// Typed strided copy: `rows` rows of `width` elements.
template <typename T>
Status copy_rows_2d(const BlockContext& c, T* dst, int64_t dst_ld, const T* src, int64_t src_ld,
                    int64_t width, int32_t rows) {
  return c.ws.memory().copy_2d(dst, size_t(dst_ld) * sizeof(T), src, size_t(src_ld) * sizeof(T),
                               size_t(width) * sizeof(T), size_t(rows));
}

// Absorbed MLA with the indexer (§8.4, §8.5): attn_out [rows, hidden].
Status mla_attention(const BlockContext& c, const AttentionWeights& w,
                     const runtime::LayerCaches& caches, const bf16* x, int32_t rows,
                     bf16* attn_out);
// down(silu(gate x) * up x) (§8.6): y [rows, w.down.out].
Status mlp(const BlockContext& c, const MlpWeights& w, const bf16* x, int32_t rows, bf16* y);
// noaux_tc MoE (§8.6): y [rows, hidden].
Status moe(const BlockContext& c, const MoeWeights& w, const bf16* x, int32_t rows, bf16* y);

}  // namespace dsa::model
