#include "dsa/runtime/metadata_builder.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/metadata_rows.h"
#include "dsa/runtime/metadata_schedule.h"
#include "dsa/runtime/metadata_validator.h"

namespace dsa::runtime {

namespace {

using kernels::fill_padded_rows;
using kernels::fill_request_rows;
using kernels::kPageSize;
using kernels::RowArrays;

Status check_request(const ForwardBatch& batch, const MetadataConfig& config,
                     const kernels::PageTable& pt, int32_t b, int32_t n,
                     std::vector<uint8_t>& slot_seen) {
  const RequestInput& q = batch.requests[static_cast<size_t>(b)];
  auto bad = [&](std::string_view field, int64_t value, std::string_view rule) {
    return invalid_argument(fmt::format("metadata builder ({}): requests[{}].{} = {}: {}",
                                        mode_name(batch.mode), b, field, value, rule));
  };
  if (q.req_slot < 1 || q.req_slot >= config.num_rows) {
    return bad("req_slot", q.req_slot, fmt::format("must be in [1, {})", config.num_rows));
  }
  if (slot_seen[static_cast<size_t>(q.req_slot)]++) {
    return bad("req_slot", q.req_slot, "is used by an earlier request of this forward");
  }
  if (q.cached_len < 0) return bad("cached_len", q.cached_len, "must be >= 0");
  if (q.new_len < 1) return bad("new_len", q.new_len, "must be >= 1");
  if (is_uniform(batch.mode) && q.new_len != n) {
    return bad("new_len", q.new_len, fmt::format("must equal n = {} in this mode", n));
  }
  const int64_t kv_len = int64_t{q.cached_len} + q.new_len;
  if (kv_len > int64_t{config.page_table_width} * kPageSize) {
    return resource_exhausted(
        fmt::format("metadata builder: requests[{}] kv_len = {}: exceeds W * P = {}", b, kv_len,
                    int64_t{config.page_table_width} * kPageSize));
  }
  // Every position the forward writes must have a page (reserved before the build).
  const int32_t last_page = static_cast<int32_t>((kv_len - 1) / kPageSize);
  for (int32_t c = q.cached_len / kPageSize; c <= last_page; ++c) {
    int32_t page = pt.data[int64_t{q.req_slot} * pt.width + c];
    if (page < 1 || page >= pt.num_pages) {
      return failed_precondition(fmt::format(
          "metadata builder: requests[{}]: page_table[{}][{}] = {}: position {} has no page "
          "(reserve pages before building)",
          b, q.req_slot, c, page, int64_t{c} * kPageSize));
    }
  }
  return ok_status();
}

// Samples of request b: the rows it sends to the LM head, relative to its first row.
std::pair<int32_t, int32_t> sample_range(const ForwardBatch& batch, const RequestInput& q,
                                         int32_t n) {
  switch (batch.mode) {
    case ForwardMode::kDecode:
      return {0, 1};
    case ForwardMode::kTargetVerify:
      return {0, n};
    case ForwardMode::kDraftExtend:
      return {q.sample_first, 1};
    case ForwardMode::kExtend:
      return {q.sample_first, q.sample_count < 0 ? 0 : q.sample_count};
    case ForwardMode::kIdle:
      return {0, 0};
  }
  return {0, 0};
}

// Per padded request of a uniform mode, the LM head still sees a fixed number of (-1) entries.
// IDLE takes those of the mode it stands in for (n = 1 a DECODE, else the target's verify or the
// MTP's draft-extend, as graph_key maps it): its forward then launches exactly what that mode's
// graph does, eager or not, so an idle DP rank takes every step a busy rank takes.
int32_t padded_samples(ForwardMode mode, ModelKind model, int32_t n) {
  switch (mode) {
    case ForwardMode::kDecode:
    case ForwardMode::kDraftExtend:
      return 1;
    case ForwardMode::kTargetVerify:
      return n;
    case ForwardMode::kIdle:
      return n == 1 || model == ModelKind::kMtp ? 1 : n;
    case ForwardMode::kExtend:
      return 0;
  }
  return 0;
}

}  // namespace

Status build_forward_metadata(const ForwardBatch& batch, const MetadataConfig& config,
                              const kernels::PageTable& pt, ForwardMetadata& out) {
  const int32_t num_req = static_cast<int32_t>(batch.requests.size());
  const bool uniform = is_uniform(batch.mode);
  const int32_t n = uniform ? rows_per_request(batch, config) : 0;
  if (uniform && (n < 1 || n > config.max_rows_per_request())) {
    return invalid_argument(fmt::format("metadata builder ({}): n = {}: must be in [1, d + 1 = {}]",
                                        mode_name(batch.mode), n, config.max_rows_per_request()));
  }
  if (batch.mode == ForwardMode::kIdle && num_req != 0) {
    return invalid_argument(
        fmt::format("metadata builder (idle): {} requests: an idle forward has none", num_req));
  }
  if (num_req > config.max_requests) {
    return resource_exhausted(
        fmt::format("metadata builder: B = {}: exceeds B_max = {}", num_req, config.max_requests));
  }
  std::vector<uint8_t> slot_seen(static_cast<size_t>(config.num_rows), 0);
  int64_t rows = 0;
  for (int32_t b = 0; b < num_req; ++b) {
    DSA_RETURN_IF_ERROR(check_request(batch, config, pt, b, n, slot_seen));
    rows += batch.requests[static_cast<size_t>(b)].new_len;
  }

  // Padding: uniform modes pad requests (n rows each); EXTEND pads rows with one padded request.
  int32_t batch_pad = num_req, rows_pad = static_cast<int32_t>(rows);
  if (uniform) {
    batch_pad = batch.batch_pad == 0 ? num_req : batch.batch_pad;
    if (batch_pad < num_req) {
      return invalid_argument(
          fmt::format("metadata builder: batch_pad = {}: below B = {}", batch.batch_pad, num_req));
    }
    if (batch_pad > config.max_requests) {
      return resource_exhausted(fmt::format("metadata builder: batch_pad = {}: exceeds B_max = {}",
                                            batch_pad, config.max_requests));
    }
    rows_pad = batch_pad * n;
  } else {
    if (batch.rows_pad != 0 && batch.rows_pad < rows) {
      return invalid_argument(
          fmt::format("metadata builder: rows_pad = {}: below rows = {}", batch.rows_pad, rows));
    }
    rows_pad = batch.rows_pad == 0 ? static_cast<int32_t>(rows) : batch.rows_pad;
    batch_pad = rows_pad > rows ? num_req + 1 : num_req;
    if (rows_pad > config.max_extend_rows) {
      return resource_exhausted(
          fmt::format("metadata builder: extend rows_pad = {}: exceeds T_ext = {}", rows_pad,
                      config.max_extend_rows));
    }
  }

  RowArrays a{
      out.row_len.data(),   out.row_topk_len.data(), out.row_req.data(), out.row_page.data(),
      out.positions.data(), out.write_slot.data(),   out.ks.data(),      out.ke.data()};
  const int32_t paged_max_rows = config.max_rows_per_request();
  int32_t pg_count = 0, pg_rows = 0, samples = 0;
  if (!uniform) {
    for (const RequestInput& q : batch.requests) {
      if (q.new_len <= paged_max_rows) {
        ++pg_count;
        pg_rows = std::max(pg_rows, q.new_len);
      }
    }
  }
  out.cu_q[0] = 0;
  out.cu_kv[0] = 0;
  int32_t pg_i = 0;
  for (int32_t b = 0; b < num_req; ++b) {
    const RequestInput& q = batch.requests[static_cast<size_t>(b)];
    const int32_t first = out.cu_q[b];
    const int32_t kv_len = q.cached_len + q.new_len;
    const bool ragged = !uniform && q.new_len > paged_max_rows;
    out.cu_q[b + 1] = first + q.new_len;
    out.cu_kv[b + 1] = out.cu_kv[b] + (ragged ? kv_len : 0);
    out.req_slot[b] = q.req_slot;
    out.req_kv_len[b] = kv_len;
    fill_request_rows(a, pt, b, q.req_slot, q.cached_len, q.new_len, first,
                      ragged ? out.cu_kv[b] : -1, config.topk);
    if (!uniform && !ragged) {
      out.pg_req_slot[pg_i] = q.req_slot;
      for (int32_t j = 0; j < pg_rows; ++j) {
        const size_t i = static_cast<size_t>(pg_i * pg_rows + j);
        out.pg_row_len[i] = j < q.new_len ? out.row_len[first + j] : 0;
        out.pg_row[i] = j < q.new_len ? first + j : -1;
      }
      ++pg_i;
    }
    auto [s_first, s_count] = sample_range(batch, q, n);
    for (int32_t j = 0; j < s_count; ++j) {
      out.sample_row[samples++] = s_first < 0 ? -1 : first + s_first + j;
    }
  }
  if (out.cu_kv[num_req] > config.max_extend_kv && out.cu_kv[num_req] > 0) {
    return resource_exhausted(
        fmt::format("metadata builder: gathered keys cu_kv[B] = {}: exceed T_ext_kv = {}",
                    out.cu_kv[num_req], config.max_extend_kv));
  }
  for (int32_t b = num_req; b < batch_pad; ++b) {
    const int32_t count = uniform ? n : rows_pad - static_cast<int32_t>(rows);
    out.cu_q[b + 1] = out.cu_q[b] + count;
    out.cu_kv[b + 1] = out.cu_kv[b];
    out.req_slot[b] = 0;
    out.req_kv_len[b] = 0;
    fill_padded_rows(a, b, out.cu_q[b], count);
    const int32_t padded = padded_samples(batch.mode, batch.model, n);
    for (int32_t j = 0; j < padded; ++j) out.sample_row[samples++] = -1;
  }
  std::fill(out.sample_row.begin() + samples, out.sample_row.end(), -1);

  MetadataHeader& h = out.header;
  h.magic = kMetadataMagic;
  h.model = batch.model;
  h.mode = batch.mode;
  h.num_requests = num_req;
  h.batch_pad = batch_pad;
  h.rows_per_request = n;
  h.rows = static_cast<int32_t>(rows);
  h.rows_pad = rows_pad;
  h.paged_requests = pg_count;
  h.paged_rows_per_req = pg_rows;
  h.topk = config.topk;
  h.page_table_width = config.page_table_width;
  h.num_samples = samples;
  h.forward_id = batch.forward_id;
  DSA_RETURN_IF_ERROR(build_metadata_schedule(config, out));
  // Checked mode validates every host build before anything consumes it (SPEC.md §4.6).
  if (checked_mode()) return validate_forward_metadata(out, config, pt);
  return ok_status();
}

}  // namespace dsa::runtime
