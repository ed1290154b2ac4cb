#include "dsa/model/decoder_block.h"

#include <cmath>
#include <cstring>

#include "dsa/core/fp8_quant.h"

namespace dsa::model {

namespace {

using kernels::kIndexHeadDim;
using kernels::kLatentDim;
using kernels::kQkDim;
using kernels::kRopeDim;

size_t sz(int64_t v) { return static_cast<size_t>(v); }

Status rmsnorm(const BlockContext& c, const bf16* x, int64_t x_stride, const std::vector<bf16>& w,
               bf16* y, int32_t rows, int32_t dim, int64_t y_stride = 0) {
  kernels::RmsNormParams p;
  p.x = x;
  p.weight = w.data();
  p.y = y;
  p.num_tokens = rows;
  p.dim = dim;
  p.x_stride = x_stride;
  p.y_stride = y_stride;
  p.eps = static_cast<float>(c.config.rms_norm_eps);
  return c.ops.rmsnorm(p);
}

Status rope(const BlockContext& c, bf16* x, int32_t rows, int32_t heads, int64_t head_stride,
            int64_t token_stride, kernels::RopeStyle style) {
  kernels::RopeParams p;
  p.x = x;
  p.positions = c.meta.positions.data();
  p.cos = c.rope.cos.data();
  p.sin = c.rope.sin.data();
  p.num_tokens = rows;
  p.num_heads = heads;
  p.head_stride = head_stride;
  p.token_stride = token_stride;
  p.num_positions = c.rope.num_positions;
  p.style = style;
  return c.ops.rope(p);
}

// The lightning indexer's per-row inputs (§8.5): e4m3 queries with their scales folded into the
// head weights, and the new bf16 key (quantised by the cache write).
Status indexer_inputs(const BlockContext& c, const IndexerWeights& w, const bf16* x, const bf16* cq,
                      int32_t rows, std::vector<uint8_t>& q8, std::vector<float>& weights,
                      std::vector<bf16>& k) {
  const int32_t hi = int32_t(c.config.index_n_heads);
  const kernels::RopeStyle style = c.config.indexer_rope_interleave
                                       ? kernels::RopeStyle::kInterleaved
                                       : kernels::RopeStyle::kNonInterleaved;
  std::vector<bf16> q(sz(rows) * hi * kIndexHeadDim);
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.wq_b, cq, rows, q.data()));
  DSA_RETURN_IF_ERROR(
      rope(c, q.data(), rows, hi, kIndexHeadDim, int64_t{hi} * kIndexHeadDim, style));
  std::vector<bf16> k_raw(sz(rows) * kIndexHeadDim);
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.wk, x, rows, k_raw.data()));
  k.resize(k_raw.size());
  kernels::LayerNormParams ln;
  ln.x = k_raw.data();
  ln.weight = w.k_norm_w.data();
  ln.bias = w.k_norm_b.data();
  ln.y = k.data();
  ln.num_tokens = rows;
  ln.dim = kIndexHeadDim;
  DSA_RETURN_IF_ERROR(c.ops.layernorm(ln));
  DSA_RETURN_IF_ERROR(rope(c, k.data(), rows, 1, kIndexHeadDim, kIndexHeadDim, style));
  kernels::HadamardParams hq{q.data(), q.data(), rows * hi};
  DSA_RETURN_IF_ERROR(c.ops.hadamard(hq));
  kernels::HadamardParams hk{k.data(), k.data(), rows};
  DSA_RETURN_IF_ERROR(c.ops.hadamard(hk));

  weights.resize(sz(rows) * hi);
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.weights_proj, x, rows, nullptr, weights.data()));
  q8.resize(q.size());
  const float fold =
      static_cast<float>(1.0 / std::sqrt(double(hi)) / std::sqrt(double(kIndexHeadDim)));
  float buf[kIndexHeadDim];
  for (int64_t i = 0; i < int64_t{rows} * hi; ++i) {
    for (int32_t t = 0; t < kIndexHeadDim; ++t)
      buf[t] = bf16_to_float(q[sz(i * kIndexHeadDim + t)]);
    const float qscale = quantize_block_pow2(buf, kIndexHeadDim, &q8[sz(i * kIndexHeadDim)]);
    weights[sz(i)] = weights[sz(i)] * fold * qscale;  // relu(s z) = s relu(z) for s > 0
  }
  return ok_status();
}

// Absorbed MLA (§8.4) around the attention step; writes attn_out [rows, hidden].
Status attention(const BlockContext& c, const AttentionWeights& w,
                 const runtime::LayerCaches& caches, const bf16* x, int32_t rows,
                 std::vector<bf16>& attn_out) {
  const ModelConfig& cf = c.config;
  const int32_t H = int32_t(cf.num_attention_heads), nope = int32_t(cf.qk_nope_head_dim);
  const int32_t qk = int32_t(cf.qk_head_dim()), v = int32_t(cf.v_head_dim);
  const int32_t q_lora = int32_t(cf.q_lora_rank);
  std::vector<bf16> qa(sz(rows) * q_lora), cq(qa.size());
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.q_a, x, rows, qa.data()));
  DSA_RETURN_IF_ERROR(rmsnorm(c, qa.data(), 0, w.q_a_norm, cq.data(), rows, q_lora));
  std::vector<bf16> q(sz(rows) * H * qk);
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.q_b, cq.data(), rows, q.data()));
  DSA_RETURN_IF_ERROR(
      rope(c, q.data() + nope, rows, H, qk, int64_t{H} * qk, kernels::RopeStyle::kInterleaved));

  // New cache rows [c | k_pe]: c normalised, k_pe roped.
  std::vector<bf16> kv(sz(rows) * kQkDim), latent(sz(rows) * kQkDim);
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.kv_a, x, rows, kv.data()));
  std::memcpy(latent.data(), kv.data(), latent.size() * sizeof(bf16));  // k_pe columns
  DSA_RETURN_IF_ERROR(
      rmsnorm(c, kv.data(), kQkDim, w.kv_a_norm, latent.data(), rows, kLatentDim, kQkDim));
  DSA_RETURN_IF_ERROR(rope(c, latent.data() + kLatentDim, rows, 1, kQkDim, kQkDim,
                           kernels::RopeStyle::kInterleaved));

  // Absorbed queries Q[h] = [q_nope W_UK | q_pe].
  std::vector<bf16> q_mla(sz(rows) * H * kQkDim), nope_h(sz(rows) * nope),
      abs_h(sz(rows) * kLatentDim);
  for (int32_t h = 0; h < H; ++h) {
    for (int32_t r = 0; r < rows; ++r) {
      std::memcpy(&nope_h[sz(r) * nope], &q[(sz(r) * H + h) * qk], sz(nope) * sizeof(bf16));
      std::memcpy(&q_mla[(sz(r) * H + h) * kQkDim + kLatentDim], &q[(sz(r) * H + h) * qk + nope],
                  kRopeDim * sizeof(bf16));
    }
    DSA_RETURN_IF_ERROR(run_linear(c.ops, w.w_uk_t[sz(h)], nope_h.data(), rows, abs_h.data()));
    for (int32_t r = 0; r < rows; ++r) {
      std::memcpy(&q_mla[(sz(r) * H + h) * kQkDim], &abs_h[sz(r) * kLatentDim],
                  kLatentDim * sizeof(bf16));
    }
  }

  std::vector<uint8_t> q8;
  std::vector<float> wts;
  std::vector<bf16> k_index;
  DSA_RETURN_IF_ERROR(indexer_inputs(c, w.indexer, x, cq.data(), rows, q8, wts, k_index));

  std::vector<float> logits(sz(rows) * sz(c.attention.logits_ld()));
  std::vector<int32_t> topk(sz(rows) * sz(c.meta.header.topk));
  std::vector<bf16> o_lat(sz(rows) * H * kLatentDim);
  std::vector<float> lse(sz(rows) * H);
  DSA_RETURN_IF_ERROR(
      c.attention.run_layer(c.meta, c.page_table, caches,
                            {q8.data(), wts.data(), k_index.data(), latent.data(), q_mla.data()},
                            {logits.data(), topk.data(), o_lat.data(), lse.data()}));

  // o[h] = o_lat[h] W_UV[h]^T, then o_proj over the concatenated heads.
  std::vector<bf16> lat_h(sz(rows) * kLatentDim), o_h(sz(rows) * v), o(sz(rows) * H * v);
  for (int32_t h = 0; h < H; ++h) {
    for (int32_t r = 0; r < rows; ++r) {
      std::memcpy(&lat_h[sz(r) * kLatentDim], &o_lat[(sz(r) * H + h) * kLatentDim],
                  kLatentDim * sizeof(bf16));
    }
    DSA_RETURN_IF_ERROR(run_linear(c.ops, w.w_uv[sz(h)], lat_h.data(), rows, o_h.data()));
    for (int32_t r = 0; r < rows; ++r) {
      std::memcpy(&o[(sz(r) * H + h) * v], &o_h[sz(r) * v], sz(v) * sizeof(bf16));
    }
  }
  attn_out.resize(sz(rows) * sz(cf.hidden_size));
  return run_linear(c.ops, w.o_proj, o.data(), rows, attn_out.data());
}

// down(silu(gate x) * up x); the activation is computed in fp32 and rounded to bf16.
Status mlp(const BlockContext& c, const MlpWeights& w, const bf16* x, int32_t rows,
           std::vector<float>& y) {
  const int32_t inter = w.gate.out;
  std::vector<bf16> g(sz(rows) * inter), u(g.size()), act(g.size());
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.gate, x, rows, g.data()));
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.up, x, rows, u.data()));
  for (size_t i = 0; i < g.size(); ++i) {
    const float gv = bf16_to_float(g[i]);
    act[i] = float_to_bf16(gv / (1.0f + std::exp(-gv)) * bf16_to_float(u[i]));
  }
  std::vector<bf16> out(sz(rows) * w.down.out);
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.down, act.data(), rows, out.data()));
  y.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) y[i] = bf16_to_float(out[i]);
  return ok_status();
}

// noaux_tc MoE (§8.6): y = sum_e g_e E_e(x) + shared(x), summed in fp32, rounded once.
Status moe(const BlockContext& c, const MoeWeights& w, const bf16* x, int32_t rows,
           std::vector<bf16>& y) {
  const ModelConfig& cf = c.config;
  const int32_t E = int32_t(cf.n_routed_experts), k = int32_t(cf.num_experts_per_tok);
  const int32_t D = int32_t(cf.hidden_size);
  std::vector<float> router(sz(rows) * E);
  DSA_RETURN_IF_ERROR(run_linear(c.ops, w.router, x, rows, nullptr, router.data()));
  std::vector<int32_t> ids(sz(rows) * k);
  std::vector<float> g(sz(rows) * k);
  kernels::MoeRoutingParams rp;
  rp.logits = router.data();
  rp.bias = w.score_bias.data();
  rp.row_len = c.meta.row_len.data();
  rp.expert_ids = ids.data();
  rp.weights = g.data();
  rp.num_tokens = rows;
  rp.num_experts = E;
  rp.num_groups = int32_t(cf.n_group);
  rp.topk_group = int32_t(cf.topk_group);
  rp.top_k = k;
  rp.routed_scaling_factor = static_cast<float>(cf.routed_scaling_factor);
  rp.norm_topk_prob = cf.norm_topk_prob;
  DSA_RETURN_IF_ERROR(c.ops.moe_routing(rp));

  // Each expert runs on the rows routed to it (row order kept, so results are batch invariant);
  // routed[(r, j)] is row r's output of its j-th selected expert.
  std::vector<float> routed(sz(rows) * k * D, 0.f);
  for (int32_t e = 0; e < E; ++e) {
    std::vector<int32_t> slots;  // r * k + j
    for (int32_t i = 0; i < rows * k; ++i) {
      if (ids[sz(i)] == e) slots.push_back(i);
    }
    if (slots.empty()) continue;
    std::vector<bf16> xe(slots.size() * sz(D));
    for (size_t i = 0; i < slots.size(); ++i) {
      std::memcpy(&xe[i * D], x + sz(slots[i] / k) * D, sz(D) * sizeof(bf16));
    }
    std::vector<float> ye;
    DSA_RETURN_IF_ERROR(mlp(c, w.experts[sz(e)], xe.data(), int32_t(slots.size()), ye));
    for (size_t i = 0; i < slots.size(); ++i) {
      std::memcpy(&routed[sz(slots[i]) * D], &ye[i * D], sz(D) * sizeof(float));
    }
  }
  std::vector<float> shared;
  if (w.shared) DSA_RETURN_IF_ERROR(mlp(c, *w.shared, x, rows, shared));
  // fp32 sum in selection order, then the shared expert; one rounding to bf16.
  std::vector<float> acc(sz(rows) * D, 0.f);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t j = 0; j < k; ++j) {
      if (ids[sz(r) * k + j] < 0) continue;  // padded rows: no expert
      const float gate = g[sz(r) * k + j];
      const float* yj = &routed[(sz(r) * k + j) * D];
      for (int32_t t = 0; t < D; ++t) acc[sz(r) * D + t] += gate * yj[t];
    }
    if (!shared.empty()) {
      for (int32_t t = 0; t < D; ++t) acc[sz(r) * D + t] += shared[sz(r) * D + t];
    }
  }
  y.resize(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) y[i] = float_to_bf16(acc[i]);
  return ok_status();
}

Status add_residual(const BlockContext& c, std::vector<bf16>& h, const std::vector<bf16>& x,
                    int32_t rows) {
  kernels::ResidualAddParams p;
  p.h = h.data();
  p.x = x.data();
  p.num_tokens = rows;
  p.dim = int32_t(c.config.hidden_size);
  return c.ops.residual_add(p);
}

}  // namespace

Status run_linear(const kernels::OpTable& ops, const LinearWeight& w, const bf16* x, int32_t rows,
                  bf16* y, float* y_f32) {
  kernels::LinearParams p;
  p.x = x;
  if (w.is_fp8()) {
    p.weight_fp8 = w.fp8_w.data();
    p.weight_scale_inv = w.scale_inv.data();
  } else {
    p.weight = w.bf16_w.data();
  }
  p.y = y;
  p.y_f32 = y_f32;
  p.num_tokens = rows;
  p.in_features = w.in;
  p.out_features = w.out;
  return ops.linear(p);
}

Status run_decoder_block(const BlockContext& c, const DecoderLayerWeights& w,
                         const runtime::LayerCaches& caches, std::vector<bf16>& h) {
  const int32_t rows = c.meta.header.rows_pad;
  const int32_t D = int32_t(c.config.hidden_size);
  std::vector<bf16> x(sz(rows) * D), branch;
  DSA_RETURN_IF_ERROR(rmsnorm(c, h.data(), 0, w.input_norm, x.data(), rows, D));
  DSA_RETURN_IF_ERROR(attention(c, w.attn, caches, x.data(), rows, branch));
  DSA_RETURN_IF_ERROR(add_residual(c, h, branch, rows));
  DSA_RETURN_IF_ERROR(rmsnorm(c, h.data(), 0, w.post_attention_norm, x.data(), rows, D));
  if (w.moe) {
    DSA_RETURN_IF_ERROR(moe(c, *w.moe, x.data(), rows, branch));
  } else {
    std::vector<float> y;
    DSA_RETURN_IF_ERROR(mlp(c, *w.mlp, x.data(), rows, y));
    branch.resize(y.size());
    for (size_t i = 0; i < y.size(); ++i) branch[i] = float_to_bf16(y[i]);
  }
  return add_residual(c, h, branch, rows);
}

}  // namespace dsa::model
