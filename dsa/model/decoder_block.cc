#include "dsa/model/decoder_block.h"

#include <utility>

#include "dsa/model/block_parts.h"

namespace dsa::model {

namespace {
// The fields every norm of a block shares (RmsNormParams, AddRmsNormParams).
template <typename Params>
Params norm_params(const BlockContext& c, const std::vector<bf16>& w, bf16* y, int32_t rows,
                   int32_t dim, int64_t y_stride) {
  Params p;
  p.weight = c.weights.get(w);
  p.y = y;
  p.num_tokens = rows;
  p.dim = dim;
  p.y_stride = y_stride;
  p.eps = static_cast<float>(c.config.rms_norm_eps);
  return p;
}
}  // namespace

Status block_rmsnorm(const BlockContext& c, const bf16* x, int64_t x_stride,
                     const std::vector<bf16>& w, bf16* y, int32_t rows, int32_t dim,
                     int64_t y_stride) {
  auto p = norm_params<kernels::RmsNormParams>(c, w, y, rows, dim, y_stride);
  p.x = x;
  p.x_stride = x_stride;
  return c.ops.rmsnorm(p);
}

kernels::RopeParams rope_params(const BlockContext& c, int32_t rows, int32_t heads,
                                kernels::RopeStyle style) {
  kernels::RopeParams p;
  p.positions = c.arrays.positions;
  p.cos = c.weights.get(c.rope.cos);
  p.sin = c.weights.get(c.rope.sin);
  p.num_tokens = rows;
  p.num_heads = heads;
  p.num_positions = c.rope.num_positions;
  p.style = style;
  return p;
}

Status block_rope(const BlockContext& c, bf16* x, int32_t rows, int32_t heads, int64_t head_stride,
                  int64_t token_stride, kernels::RopeStyle style) {
  kernels::RopeParams p = rope_params(c, rows, heads, style);
  p.x = x;
  p.head_stride = head_stride;
  p.token_stride = token_stride;
  return c.ops.rope(p);
}

Status run_linear(const kernels::OpTable& ops, const WeightStore& store, const LinearWeight& w,
                  const bf16* x, int32_t rows, bf16* y, float* y_f32) {
  kernels::LinearParams p;
  p.x = x;
  if (w.is_fp8()) {
    p.weight_fp8 = store.get(w.fp8_w);
    p.weight_scale_inv = store.get(w.scale_inv);
  } else {
    p.weight = store.get(w.bf16_w);
  }
  p.y = y;
  p.y_f32 = y_f32;
  p.num_tokens = rows;
  p.in_features = w.in;
  p.out_features = w.out;
  return ops.linear(p);
}

kernels::RmsNormParams gathered_rmsnorm_params(const BlockContext& c, const bf16* x,
                                               const int32_t* x_rows, int32_t x_row_bound,
                                               bool skip_minus_one, bf16* x_copy,
                                               const std::vector<bf16>& w, bf16* y, int32_t rows,
                                               int64_t y_stride) {
  auto p =
      norm_params<kernels::RmsNormParams>(c, w, y, rows, int32_t(c.config.hidden_size), y_stride);
  p.x = x;
  p.x_rows = x_rows;
  p.x_row_bound = x_row_bound;
  p.skip_minus_one = skip_minus_one;
  p.x_copy = x_copy;
  return p;
}

Status gathered_rmsnorm(const BlockContext& c, const bf16* x, const int32_t* x_rows,
                        int32_t x_row_bound, bool skip_minus_one, bf16* x_copy,
                        const std::vector<bf16>& w, bf16* y, int32_t rows, int64_t y_stride) {
  return c.ops.rmsnorm(gathered_rmsnorm_params(c, x, x_rows, x_row_bound, skip_minus_one, x_copy, w,
                                               y, rows, y_stride));
}

Status norm_residual(const BlockContext& c, ResidualStream& r, const std::vector<bf16>& w, bf16* y,
                     int32_t rows, int64_t y_stride) {
  const int32_t D = int32_t(c.config.hidden_size);
  if (r.table != nullptr) {
    const bf16* table = std::exchange(r.table, nullptr);
    return gathered_rmsnorm(c, table, r.ids, r.vocab, false, r.h, w, y, rows, y_stride);
  }
  if (!r.pending) return block_rmsnorm(c, r.h, 0, w, y, rows, D, y_stride);
  auto p = norm_params<kernels::AddRmsNormParams>(c, w, y, rows, D, y_stride);
  p.h = r.h;
  p.add = r.branch;
  r.pending = false;
  return c.ops.add_rmsnorm(p);
}

Status run_decoder_block(const BlockContext& c, const DecoderLayerWeights& w,
                         const runtime::LayerCaches& caches, ResidualStream& r) {
  runtime::Workspace::Frame frame(c.ws);
  const int32_t rows = c.meta.header.rows_pad;
  const int32_t D = int32_t(c.config.hidden_size);
  DSA_ASSIGN_OR_RETURN(bf16 * x, c.ws.take_uninit<bf16>(size_t(rows) * D));
  DSA_RETURN_IF_ERROR(norm_residual(c, r, w.input_norm, x, rows));
  DSA_RETURN_IF_ERROR(mla_attention(c, w.attn, caches, x, rows, r.branch));
  r.pending = true;
  DSA_RETURN_IF_ERROR(norm_residual(c, r, w.post_attention_norm, x, rows));
  if (w.moe) {
    DSA_RETURN_IF_ERROR(moe(c, *w.moe, x, rows, r.branch));
  } else {
    DSA_RETURN_IF_ERROR(mlp(c, *w.mlp, x, rows, r.branch));
  }
  r.pending = true;
  return ok_status();
}

}  // namespace dsa::model
