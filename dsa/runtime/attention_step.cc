#include "dsa/runtime/attention_step.h"

#include <algorithm>
#include <cstring>

#include "dsa/runtime/metadata_schedule.h"

namespace dsa::runtime {

using kernels::kIndexHeadDim;
using kernels::kPageSize;

AttentionStep::AttentionStep(const kernels::OpTable& ops, const MetadataConfig& config,
                             AttentionDims dims)
    : ops_(ops), config_(config), dims_(dims) {
  const int64_t wp = int64_t{config.page_table_width} * kPageSize;
  logits_ld_ = (wp + 255) / 256 * 256;
  const size_t pg_rows = size_t(config.max_requests) * size_t(config.max_rows_per_request());
  pg_q_.assign(pg_rows * size_t(dims.index_heads) * kIndexHeadDim, 0);
  pg_w_.assign(pg_rows * size_t(dims.index_heads), 0.f);
  pg_logits_.assign(pg_rows * size_t(logits_ld_), 0.f);
  gathered_k8_.assign(size_t(config.max_extend_kv) * kIndexHeadDim, 0);
  gathered_kscale_.assign(size_t(config.max_extend_kv), 0.f);
  ragged_len_.assign(size_t(config.row_capacity()), 0);
  ragged_out_row_.assign(size_t(config.row_capacity()), -1);
}

Status AttentionStep::write_caches(const ForwardMetadata& m, const LayerCaches& c,
                                   const AttentionInputs& in) {
  kernels::LatentWriteParams lw;
  lw.kv = in.kv_latent;
  lw.slot = m.write_slot.data();
  lw.num_tokens = m.header.rows_pad;
  lw.pool = c.latent;
  DSA_RETURN_IF_ERROR(ops_.latent_write(lw));
  kernels::IndexerWriteParams iw;
  iw.k = in.k_index;
  iw.slot = m.write_slot.data();
  iw.num_tokens = m.header.rows_pad;
  iw.pool = c.indexer;
  return ops_.indexer_write(iw);
}

// One paged-logits launch over `rows.layout` (the very length array the schedule was built from)
// and the paged top-k of those rows; out_row routes results to forward rows (nullptr = same row).
Status AttentionStep::paged_indexer(const ForwardMetadata& m, const kernels::PageTable& pt,
                                    const LayerCaches& c, const PagedRows& rows, int32_t* topk) {
  const MetadataHeader& h = m.header;
  const int32_t num_rows = rows.layout.batch * rows.layout.rows_per_request;
  kernels::PagedLogitsParams p;
  p.q = rows.q;
  p.w = rows.w;
  p.row_len = rows.layout.row_len;
  p.req_slot = rows.req_slot;
  p.page_table = pt;
  p.pool = c.indexer;
  p.schedule = m.schedule.data();
  p.schedule_words = static_cast<int32_t>(m.schedule.size());
  p.batch_pad = rows.layout.batch;
  p.rows_per_request = rows.layout.rows_per_request;
  p.num_heads = dims_.index_heads;
  p.num_consumers = config_.num_consumers;
  p.logits = rows.logits;
  p.logits_ld = logits_ld_;
  p.logits_rows = num_rows;
  DSA_RETURN_IF_ERROR(ops_.paged_logits(p));

  kernels::TopkParams t;
  t.logits = rows.logits;
  t.logits_ld = static_cast<int32_t>(logits_ld_);
  t.rows = num_rows;
  t.len = rows.layout.row_len;
  t.k = h.topk;
  t.variant = kernels::TopkVariant::kPaged;
  t.page_table = pt;
  t.row_page = m.row_page.data();
  t.out_row = rows.out_row;
  t.out_rows = h.rows_pad;
  t.idx = topk;
  return ops_.topk(t);
}

// EXTEND's paged sub-batch: requests with <= d + 1 new rows read the pool directly, as in the
// uniform modes, with (B_pg, n_pg) rows and top-k results routed back by pg_row.
Status AttentionStep::extend_paged_indexer(const ForwardMetadata& m, const kernels::PageTable& pt,
                                           const LayerCaches& c, const AttentionInputs& in,
                                           const AttentionOutputs& out) {
  const MetadataHeader& h = m.header;
  const int32_t pg_rows = h.paged_requests * h.paged_rows_per_req;
  if (pg_rows == 0) return ok_status();
  const size_t q_row = size_t(dims_.index_heads) * kIndexHeadDim;
  for (int32_t i = 0; i < pg_rows; ++i) {
    const int32_t r = m.pg_row[size_t(i)];
    if (r < 0) continue;  // top-up rows have length 0 and are never read
    std::memcpy(&pg_q_[size_t(i) * q_row], in.q_index + size_t(r) * q_row, q_row);
    std::memcpy(&pg_w_[size_t(i) * dims_.index_heads], in.w_index + size_t(r) * dims_.index_heads,
                sizeof(float) * size_t(dims_.index_heads));
  }
  PagedRows rows{pg_q_.data(),         pg_w_.data(),      schedule_layout(m),
                 m.pg_req_slot.data(), pg_logits_.data(), m.pg_row.data()};
  DSA_RETURN_IF_ERROR(paged_indexer(m, pt, c, rows, out.topk));
  for (int32_t i = 0; i < pg_rows; ++i) {  // expose each row's logits at its EXTEND row
    const int32_t r = m.pg_row[size_t(i)];
    if (r < 0) continue;
    std::memcpy(out.logits + size_t(r) * logits_ld_, &pg_logits_[size_t(i) * logits_ld_],
                sizeof(float) * size_t(logits_ld_));
  }
  return ok_status();
}

// EXTEND's ragged path: gather the keys of long requests, score rows against [ks, ke), select
// with the paged variant (column j is position j of the row's request). Paged-path rows are
// skipped (out_row -1); padded rows have ks = ke and get all -1.
Status AttentionStep::extend_ragged_indexer(const ForwardMetadata& m, const kernels::PageTable& pt,
                                            const LayerCaches& c, const AttentionInputs& in,
                                            const AttentionOutputs& out) {
  const MetadataHeader& h = m.header;
  kernels::IndexerGatherParams g;
  g.req_slot = m.req_slot.data();
  g.cu_kv = m.cu_kv.data();
  g.page_table = pt;
  g.pool = c.indexer;
  g.batch_pad = h.batch_pad;
  g.k8 = gathered_k8_.data();
  g.kscale = gathered_kscale_.data();
  g.capacity = config_.max_extend_kv;
  DSA_RETURN_IF_ERROR(ops_.indexer_gather(g));

  for (int32_t r = 0; r < h.rows_pad; ++r) {
    const int32_t b = m.row_req[size_t(r)];
    const bool ragged = m.cu_kv[size_t(b) + 1] > m.cu_kv[size_t(b)];
    const bool padded = b >= h.num_requests;
    ragged_len_[size_t(r)] = m.ke[size_t(r)] - m.ks[size_t(r)];
    ragged_out_row_[size_t(r)] = (ragged || padded) ? r : -1;
  }
  kernels::RaggedLogitsParams p;
  p.q = in.q_index;
  p.w = in.w_index;
  p.k8 = gathered_k8_.data();
  p.kscale = gathered_kscale_.data();
  p.ks = m.ks.data();
  p.ke = m.ke.data();
  p.num_tokens = h.rows_pad;
  p.num_keys = m.cu_kv[size_t(h.batch_pad)];
  p.num_heads = dims_.index_heads;
  p.logits = out.logits;
  p.logits_ld = logits_ld_;
  p.workspace_bytes = int64_t{h.rows_pad} * logits_ld_ * 4;
  // Paged-path rows have ks = ke = 0: empty here; run_layer fills them from the paged sub-batch.
  DSA_RETURN_IF_ERROR(ops_.ragged_logits(p));

  kernels::TopkParams t;
  t.logits = out.logits;
  t.logits_ld = static_cast<int32_t>(logits_ld_);
  t.rows = h.rows_pad;
  t.len = ragged_len_.data();
  t.k = h.topk;
  t.variant = kernels::TopkVariant::kPaged;
  t.page_table = pt;
  t.row_page = m.row_page.data();
  t.out_row = ragged_out_row_.data();
  t.out_rows = h.rows_pad;
  t.idx = out.topk;
  return ops_.topk(t);
}

Status AttentionStep::run_layer(const ForwardMetadata& m, const kernels::PageTable& pt,
                                const LayerCaches& c, const AttentionInputs& in,
                                const AttentionOutputs& out) {
  const MetadataHeader& h = m.header;
  if (h.rows_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(write_caches(m, c, in));  // (1) before anything reads the caches
  if (is_uniform(h.mode)) {
    PagedRows rows{in.q_index,        in.w_index, schedule_layout(m),
                   m.req_slot.data(), out.logits, nullptr};
    DSA_RETURN_IF_ERROR(paged_indexer(m, pt, c, rows, out.topk));
  } else {
    DSA_RETURN_IF_ERROR(extend_ragged_indexer(m, pt, c, in, out));
    DSA_RETURN_IF_ERROR(extend_paged_indexer(m, pt, c, in, out));
  }
  kernels::SparseMlaDecodeParams a;
  a.q = in.q_mla;
  a.cache = c.latent;
  a.indices = out.topk;
  a.topk_len = m.row_topk_len.data();
  a.rows = h.rows_pad;
  a.num_heads = dims_.mla_heads;
  a.topk = h.topk;
  a.sm_scale = dims_.sm_scale;
  a.out = out.out;
  a.lse = out.lse;
  return ops_.sparse_mla_decode(a);
}

}  // namespace dsa::runtime
