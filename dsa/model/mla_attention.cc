// Absorbed MLA around the attention step (SPEC.md §8.4) and the lightning indexer's inputs (§8.5).
// The per-head projections read and write the [rows, H, ...] activations in place through one
// strided-batched linear each (kernels/batched_linear), so a layer's op count is independent of H.
#include <cmath>

#include "dsa/model/block_parts.h"

namespace dsa::model {

namespace {

using kernels::kIndexHeadDim;
using kernels::kLatentDim;
using kernels::kQkDim;
using kernels::kRopeDim;

struct IndexerInputs {
  uint8_t* q8 = nullptr;  // [rows, H_i, 128] e4m3
  float* w = nullptr;     // [rows, H_i] fp32, q scale folded in
  bf16* k = nullptr;      // [rows, 128] bf16 new key (quantised by the cache write)
};

kernels::RopeStyle indexer_rope_style(const BlockContext& c) {
  return c.config.indexer_rope_interleave ? kernels::RopeStyle::kInterleaved
                                          : kernels::RopeStyle::kNonInterleaved;
}

// The three projections of the attention norm's output x, each `rows` rows of its own width at
// its `_ld` apart: one fused linear's column ranges (fused_projections.h) or three linears'
// outputs. Taken from the caller's workspace frame.
struct NormProjections {
  bf16* qa;  // [rows, q_lora]
  int64_t qa_ld;
  bf16* k_raw;  // [rows, D_i] the indexer's key before its norm
  int64_t k_ld;
  bf16* latent;  // [rows, 576] the new cache rows [c | k_pe] before the norm and RoPE
  int64_t latent_ld;
};

StatusOr<NormProjections> norm_projections(const BlockContext& c, const AttentionWeights& w,
                                           const bf16* x, int32_t rows) {
  if (w.qkv_a.out > 0) {
    const int64_t ld = w.qkv_a.out;
    DSA_ASSIGN_OR_RETURN(bf16 * y, c.ws.take_uninit<bf16>(size_t(rows) * size_t(ld)));
    DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.qkv_a, x, rows, y));
    bf16* k_raw = y + w.q_a.out;
    return NormProjections{y, ld, k_raw, ld, k_raw + w.indexer.wk.out, ld};
  }
  NormProjections p{nullptr, w.q_a.out, nullptr, w.indexer.wk.out, nullptr, kQkDim};
  DSA_ASSIGN_OR_RETURN(p.qa, c.ws.take_uninit<bf16>(size_t(rows) * size_t(p.qa_ld)));
  DSA_ASSIGN_OR_RETURN(p.k_raw, c.ws.take_uninit<bf16>(size_t(rows) * size_t(p.k_ld)));
  DSA_ASSIGN_OR_RETURN(p.latent, c.ws.take_uninit<bf16>(size_t(rows) * size_t(p.latent_ld)));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.q_a, x, rows, p.qa));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.indexer.wk, x, rows, p.k_raw));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.kv_a, x, rows, p.latent));
  return p;
}

// The indexer's queries as e4m3 with their scales folded into the head weights (§8.5 steps 1,
// 3-5). `fused_q` (rows `fused_q_ld` apart): the queries as the fused q_b linear wrote them; null:
// wq_b runs here on cq. With the fused row ops one launch ropes, rotates and quantises them where
// they are; else they are copied out (fused q_b) and the separate ops run.
Status indexer_queries(const BlockContext& c, const IndexerWeights& w, const bf16* x,
                       const bf16* cq, const bf16* fused_q, int64_t fused_q_ld, int32_t rows,
                       IndexerInputs& out) {
  const int32_t hi = int32_t(c.config.index_n_heads);
  const size_t q_size = size_t(rows) * hi * kIndexHeadDim;
  const int64_t width = int64_t{hi} * kIndexHeadDim;
  const float fold =
      static_cast<float>(1.0 / std::sqrt(double(hi)) / std::sqrt(double(kIndexHeadDim)));
  DSA_ASSIGN_OR_RETURN(out.q8, c.ws.take_uninit<uint8_t>(q_size));
  DSA_ASSIGN_OR_RETURN(out.w, c.ws.take_uninit<float>(size_t(rows) * hi));
  runtime::Workspace::Frame frame(c.ws);
  const bf16* q = fused_q;
  int64_t q_ld = fused_q_ld;
  bf16* q_dense = nullptr;  // the unfused ops' own copy, roped and rotated in place
  if (fused_q == nullptr || !c.fused_row_ops) {
    DSA_ASSIGN_OR_RETURN(q_dense, c.ws.take_uninit<bf16>(q_size));
    if (fused_q != nullptr) {
      DSA_RETURN_IF_ERROR(copy_rows_2d(c, q_dense, width, fused_q, fused_q_ld, width, rows));
    } else {
      DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.wq_b, cq, rows, q_dense));
    }
    q = q_dense;
    q_ld = width;
  }
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, w.weights_proj, x, rows, nullptr, out.w));
  const kernels::RopeStyle style = indexer_rope_style(c);
  if (c.fused_row_ops) {
    kernels::IndexerQueryParams p;
    p.q = q;
    p.q_token_stride = q_ld;
    p.q8 = out.q8;
    p.w = out.w;
    p.num_tokens = rows;
    p.num_heads = hi;
    p.fold = fold;
    p.style = style;
    p.positions = c.arrays.positions;
    p.cos = c.weights.get(c.rope.cos);
    p.sin = c.weights.get(c.rope.sin);
    p.num_positions = c.rope.num_positions;
    return c.ops.indexer_query(p);
  }
  DSA_RETURN_IF_ERROR(block_rope(c, q_dense, rows, hi, kIndexHeadDim, width, style));
  kernels::HadamardParams hq{q_dense, q_dense, rows * hi};
  DSA_RETURN_IF_ERROR(c.ops.hadamard(hq));
  kernels::IndexerQuantParams qp;
  qp.q = q_dense;
  qp.q8 = out.q8;
  qp.w = out.w;
  qp.num_blocks = int64_t{rows} * hi;
  qp.fold = fold;
  return c.ops.indexer_q_quant(qp);
}

// The row transforms of the three projections (§8.4, §8.5 step 2-3): cq = q_a's norm; the new
// latent rows [c | k_pe] normalised and roped in place where kv_a wrote them; the indexer's new
// key (normed, roped, rotated; quantised by the cache write). One launch with the fused row ops,
// else the separate ops in the same order (bit-identical either way).
Status projection_rows(const BlockContext& c, const AttentionWeights& w, const NormProjections& pr,
                       int32_t rows, bf16* cq, bf16* k) {
  const IndexerWeights& iw = w.indexer;
  if (c.fused_row_ops) {
    kernels::AttentionPrologueParams p;
    p.num_tokens = rows;
    p.qa = pr.qa;
    p.qa_ld = pr.qa_ld;
    p.q_a_norm_w = c.weights.get(w.q_a_norm);
    p.cq = cq;
    p.q_lora = int32_t(c.config.q_lora_rank);
    p.latent = pr.latent;
    p.latent_ld = pr.latent_ld;
    p.kv_a_norm_w = c.weights.get(w.kv_a_norm);
    p.k_raw = pr.k_raw;
    p.k_raw_ld = pr.k_ld;
    p.k_norm_w = c.weights.get(iw.k_norm_w);
    p.k_norm_b = c.weights.get(iw.k_norm_b);
    p.k = k;
    p.index_rope_style = indexer_rope_style(c);
    p.positions = c.arrays.positions;
    p.cos = c.weights.get(c.rope.cos);
    p.sin = c.weights.get(c.rope.sin);
    p.num_positions = c.rope.num_positions;
    p.rms_eps = static_cast<float>(c.config.rms_norm_eps);
    p.layernorm_eps = kernels::LayerNormParams{}.eps;
    return c.ops.attention_prologue(p);
  }
  DSA_RETURN_IF_ERROR(
      block_rmsnorm(c, pr.qa, pr.qa_ld, w.q_a_norm, cq, rows, int32_t(c.config.q_lora_rank)));
  // c normalised in place (rows independent, so the norm reads each row before writing it) and
  // k_pe roped, with no copy between.
  DSA_RETURN_IF_ERROR(block_rmsnorm(c, pr.latent, pr.latent_ld, w.kv_a_norm, pr.latent, rows,
                                    kLatentDim, pr.latent_ld));
  DSA_RETURN_IF_ERROR(block_rope(c, pr.latent + kLatentDim, rows, 1, pr.latent_ld, pr.latent_ld,
                                 kernels::RopeStyle::kInterleaved));
  kernels::LayerNormParams ln;
  ln.x = pr.k_raw;
  ln.x_stride = pr.k_ld;
  ln.weight = c.weights.get(iw.k_norm_w);
  ln.bias = c.weights.get(iw.k_norm_b);
  ln.y = k;
  ln.num_tokens = rows;
  ln.dim = kIndexHeadDim;
  DSA_RETURN_IF_ERROR(c.ops.layernorm(ln));
  DSA_RETURN_IF_ERROR(
      block_rope(c, k, rows, 1, kIndexHeadDim, kIndexHeadDim, indexer_rope_style(c)));
  kernels::HadamardParams hk{k, k, rows};
  return c.ops.hadamard(hk);
}

// One strided-batched linear over every head: x[t][h] (x_head apart in a row of H of them) times
// w's matrix h, into y[t][h] (y_head apart). So the op count per layer does not depend on H.
Status run_head_linear(const BlockContext& c, const HeadLinearWeight& w, const bf16* x,
                       int64_t x_head, int32_t rows, bf16* y, int64_t y_head, int64_t x_ld = 0) {
  kernels::BatchedLinearParams p;
  p.x = x;
  p.weight = c.weights.get(w.bf16_w);
  p.y = y;
  p.batch = w.heads;
  p.num_tokens = rows;
  p.in_features = w.in;
  p.out_features = w.out;
  p.x_ld = x_ld != 0 ? x_ld : int64_t{w.heads} * x_head;
  p.x_batch_stride = x_head;
  p.w_batch_stride = int64_t{w.out} * w.in;
  p.y_ld = int64_t{w.heads} * y_head;
  p.y_batch_stride = y_head;
  return c.ops.batched_linear(p);
}

// Absorbed queries Q[h] = [q_nope W_UK | rope(q_pe)] from q [rows, H, qk] (rows q_ld apart): RoPE
// reads q_pe there and writes it into Q (out of place, no copy), q_nope W_UK by one batched linear.
Status absorbed_queries(const BlockContext& c, const AttentionWeights& w, bf16* q, int64_t q_ld,
                        int32_t rows, bf16* q_mla) {
  const ModelConfig& cf = c.config;
  const int32_t H = int32_t(cf.num_attention_heads), nope = int32_t(cf.qk_nope_head_dim);
  const int32_t qk = int32_t(cf.qk_head_dim());
  kernels::RopeParams rp = rope_params(c, rows, H, kernels::RopeStyle::kInterleaved);
  rp.x = q + nope;  // only read: the rotated values go to y
  rp.head_stride = qk;
  rp.token_stride = q_ld;
  rp.y = q_mla + kLatentDim;
  rp.y_head_stride = kQkDim;
  rp.y_token_stride = int64_t{H} * kQkDim;
  DSA_RETURN_IF_ERROR(c.ops.rope(rp));
  return run_head_linear(c, w.w_uk_t, q, qk, rows, q_mla, kQkDim, q_ld);
}

// o[h] = o_lat[h] W_UV[h]^T (one batched linear), then o_proj over the concatenated heads.
Status output_projection(const BlockContext& c, const AttentionWeights& w, const bf16* o_lat,
                         int32_t rows, bf16* attn_out) {
  const int32_t H = int32_t(c.config.num_attention_heads), v = int32_t(c.config.v_head_dim);
  runtime::Workspace::Frame frame(c.ws);
  DSA_ASSIGN_OR_RETURN(bf16 * o, c.ws.take_uninit<bf16>(size_t(rows) * H * v));
  DSA_RETURN_IF_ERROR(run_head_linear(c, w.w_uv, o_lat, kLatentDim, rows, o, v));
  return run_linear(c.ops, c.weights, w.o_proj, o, rows, attn_out);
}

}  // namespace

Status mla_attention(const BlockContext& c, const AttentionWeights& w,
                     const runtime::LayerCaches& caches, const bf16* x, int32_t rows,
                     bf16* attn_out) {
  const ModelConfig& cf = c.config;
  const int32_t H = int32_t(cf.num_attention_heads);
  const int32_t qk = int32_t(cf.qk_head_dim()), q_lora = int32_t(cf.q_lora_rank);
  runtime::Workspace::Frame frame(c.ws);
  DSA_ASSIGN_OR_RETURN(const NormProjections pr, norm_projections(c, w, x, rows));
  IndexerInputs ix;
  DSA_ASSIGN_OR_RETURN(ix.k, c.ws.take_uninit<bf16>(size_t(rows) * kIndexHeadDim));
  DSA_ASSIGN_OR_RETURN(bf16 * cq, c.ws.take_uninit<bf16>(size_t(rows) * q_lora));
  DSA_RETURN_IF_ERROR(projection_rows(c, w, pr, rows, cq, ix.k));
  // q [rows, H, qk], rows q_ld apart: q_b's output, or its columns of the fused q_b linear, whose
  // other columns are the indexer's queries (fused_projections.h).
  const bool fused_q = w.q_b_fused.out > 0;
  const int64_t q_ld = fused_q ? int64_t{w.q_b_fused.out} : int64_t{H} * qk;
  DSA_ASSIGN_OR_RETURN(bf16 * q, c.ws.take_uninit<bf16>(size_t(rows) * size_t(q_ld)));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, c.weights, fused_q ? w.q_b_fused : w.q_b, cq, rows, q));

  DSA_ASSIGN_OR_RETURN(bf16 * q_mla, c.ws.take_uninit<bf16>(size_t(rows) * H * kQkDim));
  DSA_RETURN_IF_ERROR(absorbed_queries(c, w, q, q_ld, rows, q_mla));
  DSA_RETURN_IF_ERROR(
      indexer_queries(c, w.indexer, x, cq, fused_q ? q + w.q_b.out : nullptr, q_ld, rows, ix));

  // Top-k reads a logits row only up to its length, which the logits op writes; every top-k row
  // is written (EXTEND: ragged and padded rows by the ragged pass, the rest by the paged one).
  DSA_ASSIGN_OR_RETURN(float* logits,
                       c.ws.take_uninit<float>(size_t(rows) * c.attention.logits_ld()));
  DSA_ASSIGN_OR_RETURN(int32_t * topk,
                       c.ws.take_uninit<int32_t>(size_t(rows) * c.meta.header.topk));
  DSA_ASSIGN_OR_RETURN(bf16 * o_lat, c.ws.take_uninit<bf16>(size_t(rows) * H * kLatentDim));
  DSA_ASSIGN_OR_RETURN(float* lse, c.ws.take_uninit<float>(size_t(rows) * H));
  DSA_RETURN_IF_ERROR(c.attention.run_layer(c.meta, c.arrays, caches,
                                            {ix.q8, ix.w, ix.k, pr.latent, q_mla, pr.latent_ld},
                                            {logits, topk, o_lat, lse}));
  return output_projection(c, w, o_lat, rows, attn_out);
}

}  // namespace dsa::model
