#include "dsa/runtime/attention_step.h"

#include <algorithm>
#include <span>

#include "dsa/runtime/metadata_schedule.h"

namespace dsa::runtime {

using kernels::kIndexHeadDim;
using kernels::kPageSize;

AttentionStep::AttentionStep(const kernels::OpTable& ops, const MetadataConfig& config,
                             AttentionDims dims)
    : ops_(ops), config_(config), dims_(dims) {
  const int64_t wp = int64_t{config.page_table_width} * kPageSize;
  logits_ld_ = (wp + 255) / 256 * 256;
  ragged_len_.assign(size_t(config.row_capacity()), 0);
  ragged_out_row_.assign(size_t(config.row_capacity()), -1);
}

namespace {

// The launcher splits only while R * ceil(H / 64) CTAs leave SMs idle, so splits * R * H stays
// below SMs * 64 whatever R is; sized for an H200's 132 SMs (with more SMs the launcher caps the
// count by this capacity). 17 MB.
constexpr int64_t kMlaSplitWorkspaceFloats = int64_t{132} * 64 * (kernels::kVDim + 2);

}  // namespace

Status AttentionStep::allocate_scratch() {
  const kernels::Backend b = ops_.backend;
  const size_t pg_rows = size_t(config_.max_requests) * size_t(config_.max_rows_per_request());
  DSA_ASSIGN_OR_RETURN(
      pg_q_, Buffer<uint8_t>::alloc(b, pg_rows * size_t(dims_.index_heads) * kIndexHeadDim));
  DSA_ASSIGN_OR_RETURN(pg_w_, Buffer<float>::alloc(b, pg_rows * size_t(dims_.index_heads)));
  DSA_ASSIGN_OR_RETURN(pg_logits_, Buffer<float>::alloc(b, pg_rows * size_t(logits_ld_)));
  DSA_ASSIGN_OR_RETURN(gathered_k8_,
                       Buffer<uint8_t>::alloc(b, size_t(config_.max_extend_kv) * kIndexHeadDim));
  DSA_ASSIGN_OR_RETURN(gathered_kscale_, Buffer<float>::alloc(b, size_t(config_.max_extend_kv)));
  DSA_ASSIGN_OR_RETURN(ragged_len_buf_, Buffer<int32_t>::alloc(b, ragged_len_.size()));
  DSA_ASSIGN_OR_RETURN(ragged_out_row_buf_, Buffer<int32_t>::alloc(b, ragged_out_row_.size()));
  if (b == kernels::Backend::kCuda) {
    DSA_ASSIGN_OR_RETURN(mla_split_ws_, Buffer<float>::alloc(b, size_t(kMlaSplitWorkspaceFloats)));
  }
  scratch_ready_ = true;
  return ok_status();
}

Status AttentionStep::copy_rows(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                                int64_t row_bytes, const int32_t* index, int32_t rows,
                                int32_t bound, kernels::RowCopyMode mode) {
  kernels::RowCopyParams p;
  p.src = src;
  p.dst = dst;
  p.index = index;
  p.src_stride = src_stride;
  p.dst_stride = dst_stride;
  p.row_bytes = row_bytes;
  p.num_rows = rows;
  p.index_bound = bound;
  p.mode = mode;
  return ops_.row_copy(p);
}

Status AttentionStep::write_caches(const ForwardMetadata& m, const MetadataArrays& a,
                                   const LayerCaches& c, const AttentionInputs& in) {
  kernels::LatentWriteParams lw;
  lw.kv = in.kv_latent;
  lw.kv_stride = in.kv_latent_stride;
  lw.slot = a.write_slot;
  lw.num_tokens = m.header.rows_pad;
  lw.pool = c.latent;
  DSA_RETURN_IF_ERROR(ops_.latent_write(lw));
  kernels::IndexerWriteParams iw;
  iw.k = in.k_index;
  iw.slot = a.write_slot;
  iw.num_tokens = m.header.rows_pad;
  iw.pool = c.indexer;
  return ops_.indexer_write(iw);
}

// One paged-logits launch over `rows.layout` (the very length array the schedule was built from)
// and the paged top-k of those rows; out_row routes results to forward rows (nullptr = same row).
Status AttentionStep::paged_indexer(const ForwardMetadata& m, const MetadataArrays& a,
                                    const LayerCaches& c, const PagedRows& rows, int32_t* topk) {
  const MetadataHeader& h = m.header;
  const int32_t num_rows = rows.layout.batch * rows.layout.rows_per_request;
  kernels::PagedLogitsParams p;
  p.q = rows.q;
  p.w = rows.w;
  p.row_len = rows.layout.row_len;
  p.req_slot = rows.req_slot;
  p.page_table = a.page_table;
  p.pool = c.indexer;
  p.schedule = a.schedule;
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
  t.page_table = a.page_table;
  t.row_page = a.row_page;
  t.out_row = rows.out_row;
  t.out_rows = h.rows_pad;
  t.idx = topk;
  return ops_.topk(t);
}

// EXTEND's paged sub-batch: requests with <= d + 1 new rows read the pool directly, as in the
// uniform modes, with (B_pg, n_pg) rows and top-k results routed back by pg_row.
Status AttentionStep::extend_paged_indexer(const ForwardMetadata& m, const MetadataArrays& a,
                                           const LayerCaches& c, const AttentionInputs& in,
                                           const AttentionOutputs& out) {
  const MetadataHeader& h = m.header;
  const int32_t pg_rows = h.paged_requests * h.paged_rows_per_req;
  if (pg_rows == 0) return ok_status();
  // Top-up rows (pg_row -1) have length 0 and are never read.
  const int64_t q_row = int64_t{dims_.index_heads} * kIndexHeadDim;
  const int64_t w_row = int64_t{dims_.index_heads} * int64_t{sizeof(float)};
  const int64_t l_row = logits_ld_ * int64_t{sizeof(float)};
  using kernels::RowCopyMode;
  DSA_RETURN_IF_ERROR(copy_rows(in.q_index, q_row, pg_q_.data(), q_row, q_row, a.pg_row, pg_rows,
                                h.rows_pad, RowCopyMode::kGather));
  DSA_RETURN_IF_ERROR(copy_rows(in.w_index, w_row, pg_w_.data(), w_row, w_row, a.pg_row, pg_rows,
                                h.rows_pad, RowCopyMode::kGather));
  ScheduleLayout layout = schedule_layout(m);
  layout.row_len = a.pg_row_len;
  PagedRows rows{pg_q_.data(), pg_w_.data(), layout, a.pg_req_slot, pg_logits_.data(), a.pg_row};
  DSA_RETURN_IF_ERROR(paged_indexer(m, a, c, rows, out.topk));
  // Expose each row's logits at its EXTEND row.
  return copy_rows(pg_logits_.data(), l_row, out.logits, l_row, l_row, a.pg_row, pg_rows,
                   h.rows_pad, RowCopyMode::kScatter);
}

// EXTEND's ragged path: gather the keys of long requests, score rows against [ks, ke), select
// with the paged variant (column j is position j of the row's request). Paged-path rows are
// skipped (out_row -1); padded rows have ks = ke and get all -1.
Status AttentionStep::extend_ragged_indexer(const ForwardMetadata& m, const MetadataArrays& a,
                                            const LayerCaches& c, const AttentionInputs& in,
                                            const AttentionOutputs& out) {
  const MetadataHeader& h = m.header;
  kernels::IndexerGatherParams g;
  g.req_slot = a.req_slot;
  g.cu_kv = a.cu_kv;
  g.page_table = a.page_table;
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
  const size_t used = size_t(h.rows_pad);
  DSA_RETURN_IF_ERROR(ragged_len_buf_.upload(std::span<const int32_t>(ragged_len_.data(), used)));
  DSA_RETURN_IF_ERROR(
      ragged_out_row_buf_.upload(std::span<const int32_t>(ragged_out_row_.data(), used)));
  kernels::RaggedLogitsParams p;
  p.q = in.q_index;
  p.w = in.w_index;
  p.k8 = gathered_k8_.data();
  p.kscale = gathered_kscale_.data();
  p.ks = a.ks;
  p.ke = a.ke;
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
  t.len = ragged_len_buf_.data();
  t.k = h.topk;
  t.variant = kernels::TopkVariant::kPaged;
  t.page_table = a.page_table;
  t.row_page = a.row_page;
  t.out_row = ragged_out_row_buf_.data();
  t.out_rows = h.rows_pad;
  t.idx = out.topk;
  return ops_.topk(t);
}

Status AttentionStep::run_layer(const ForwardMetadata& m, const kernels::PageTable& pt,
                                const LayerCaches& c, const AttentionInputs& in,
                                const AttentionOutputs& out) {
  return run_layer(m, host_arrays(m, pt), c, in, out);
}

Status AttentionStep::run_layer(const ForwardMetadata& m, const MetadataArrays& a,
                                const LayerCaches& c, const AttentionInputs& in,
                                const AttentionOutputs& out) {
  const MetadataHeader& h = m.header;
  if (h.rows_pad == 0) return ok_status();
  if (!scratch_ready_) DSA_RETURN_IF_ERROR(allocate_scratch());
  DSA_RETURN_IF_ERROR(write_caches(m, a, c, in));  // (1) before anything reads the caches
  if (is_uniform(h.mode)) {
    ScheduleLayout layout = schedule_layout(m);
    layout.row_len = a.row_len;
    PagedRows rows{in.q_index, in.w_index, layout, a.req_slot, out.logits, nullptr};
    DSA_RETURN_IF_ERROR(paged_indexer(m, a, c, rows, out.topk));
  } else {
    DSA_RETURN_IF_ERROR(extend_ragged_indexer(m, a, c, in, out));
    DSA_RETURN_IF_ERROR(extend_paged_indexer(m, a, c, in, out));
  }
  kernels::SparseMlaDecodeParams p;
  p.q = in.q_mla;
  p.cache = c.latent;
  p.indices = out.topk;
  p.topk_len = a.row_topk_len;
  p.rows = h.rows_pad;
  p.num_heads = dims_.mla_heads;
  p.topk = h.topk;
  p.sm_scale = dims_.sm_scale;
  p.out = out.out;
  p.lse = out.lse;
  // Split-KV when the rows leave SMs idle (a decode of few requests: at batch 1 and 128 heads the
  // unsplit kernel is 2 CTAs on 132 SMs). The launcher picks the count from rows_pad alone, so
  // a graph replays the split it was captured with.
  p.split_workspace = mla_split_ws_.data();
  p.split_workspace_floats = mla_split_ws_.data() != nullptr ? kMlaSplitWorkspaceFloats : 0;
  return ops_.sparse_mla_decode(p);
}

}  // namespace dsa::runtime
