#include "dsa/runtime/metadata_validator.h"

#include <fmt/format.h>

#include <unordered_set>

#include "dsa/runtime/metadata_schedule.h"

namespace dsa::runtime {

namespace {

using kernels::kPageSize;

Status broken(int inv, std::string_view what, std::string detail) {
  return failed_precondition(fmt::format("metadata invariant {} ({}): {}", inv, what, detail));
}

// Everything the checks share: the header fields and the buffers.
struct View {
  const ForwardMetadata& m;
  const MetadataConfig& c;
  const kernels::PageTable& pt;
  const MetadataHeader& h;
  bool uniform;
  int32_t B, B_pad, n, rows, rows_pad;
  size_t z(int64_t i) const { return static_cast<size_t>(i); }
  bool real_row(int32_t r) const { return r < rows; }
};

Status inv13_capacities(const View& v) {
  const MetadataConfig& c = v.c;
  int64_t req_cap = v.uniform ? c.max_requests : c.max_requests + 1;
  if (v.B < 0 || v.B > v.B_pad || v.B_pad > req_cap) {
    return broken(13, "capacities",
                  fmt::format("B = {}, B_pad = {}, capacity {}", v.B, v.B_pad, req_cap));
  }
  int64_t row_cap =
      v.uniform ? int64_t{c.max_requests} * c.max_rows_per_request() : c.max_extend_rows;
  if (v.rows < 0 || v.rows > v.rows_pad || v.rows_pad > row_cap) {
    return broken(
        13, "capacities",
        fmt::format("rows = {}, rows_pad = {}, capacity {}", v.rows, v.rows_pad, row_cap));
  }
  if (v.m.cu_kv[v.z(v.B_pad)] > c.max_extend_kv && v.m.cu_kv[v.z(v.B_pad)] > 0) {
    return broken(
        13, "capacities",
        fmt::format("cu_kv[B_pad] = {} > T_ext_kv = {}", v.m.cu_kv[v.z(v.B_pad)], c.max_extend_kv));
  }
  return ok_status();
}

Status inv11_prefix_sums(const View& v) {
  if (v.m.cu_q[0] != 0 || v.m.cu_kv[0] != 0)
    return broken(11, "prefix sums", "cu_q[0] or cu_kv[0] != 0");
  for (int32_t b = 0; b < v.B_pad; ++b) {
    int32_t count = 0;
    for (int32_t r = 0; r < v.rows_pad; ++r) count += v.m.row_req[v.z(r)] == b;
    if (v.m.cu_q[v.z(b + 1)] - v.m.cu_q[v.z(b)] != count) {
      return broken(11, "prefix sums",
                    fmt::format("cu_q[{}] - cu_q[{}] = {}, request has {} rows", b + 1, b,
                                v.m.cu_q[v.z(b + 1)] - v.m.cu_q[v.z(b)], count));
    }
    int32_t kv_step = v.m.cu_kv[v.z(b + 1)] - v.m.cu_kv[v.z(b)];
    if (kv_step != 0 && kv_step != v.m.req_kv_len[v.z(b)]) {
      return broken(11, "prefix sums",
                    fmt::format("cu_kv[{}] - cu_kv[{}] = {}: neither 0 nor kv_len {}", b + 1, b,
                                kv_step, v.m.req_kv_len[v.z(b)]));
    }
  }
  return ok_status();
}

Status inv1_inv2_rows(const View& v) {
  if (v.m.cu_q[v.z(v.B)] != v.rows) {
    return broken(1, "row counts",
                  fmt::format("rows = {} but cu_q[B] = {}", v.rows, v.m.cu_q[v.z(v.B)]));
  }
  if (v.m.cu_q[v.z(v.B_pad)] != v.rows_pad || (v.uniform && v.rows_pad != v.B_pad * v.n)) {
    return broken(1, "row counts",
                  fmt::format("rows_pad = {}, cu_q[B_pad] = {}, B_pad * n = {}", v.rows_pad,
                              v.m.cu_q[v.z(v.B_pad)], v.B_pad * v.n));
  }
  if (!v.uniform && v.B_pad != v.B + (v.rows_pad > v.rows ? 1 : 0)) {
    return broken(1, "row counts",
                  fmt::format("extend B_pad = {} with B = {}, rows {} / {}", v.B_pad, v.B, v.rows,
                              v.rows_pad));
  }
  for (int32_t r = 0; r < v.rows_pad; ++r) {
    const int32_t b = v.m.row_req[v.z(r)];
    if ((r < v.rows) != (b >= 0 && b < v.B)) {
      return broken(1, "real rows first",
                    fmt::format("row {}: row_req = {}, B = {}, rows = {}", r, b, v.B, v.rows));
    }
    if (b < 0 || b >= v.B_pad || r < v.m.cu_q[v.z(b)] || r >= v.m.cu_q[v.z(b + 1)] ||
        (v.uniform && b != r / v.n)) {
      return broken(2, "row to request", fmt::format("row_req[{}] = {}", r, b));
    }
  }
  return ok_status();
}

Status inv3_to_8_rows(const View& v) {
  const int64_t wp = int64_t{v.h.page_table_width} * kPageSize;
  for (int32_t r = 0; r < v.rows_pad; ++r) {
    const size_t i = v.z(r);
    const int32_t b = v.m.row_req[i], len = v.m.row_len[i];
    const int32_t kv = v.m.req_kv_len[v.z(b)];
    if (len < 0 || len > kv || kv > wp || (v.real_row(r) && len < 1)) {
      return broken(3, "lengths",
                    fmt::format("row_len[{}] = {}, kv_len = {}, W*P = {}", r, len, kv, wp));
    }
    if (v.m.row_topk_len[i] != std::min(len, v.h.topk)) {
      return broken(4, "top-k length",
                    fmt::format("row_topk_len[{}] = {}, row_len {}, K {}", r, v.m.row_topk_len[i],
                                len, v.h.topk));
    }
    if (v.real_row(r)) {
      const bool last = r + 1 == v.m.cu_q[v.z(b + 1)];
      const bool first = r == v.m.cu_q[v.z(b)];
      if ((!first && len != v.m.row_len[i - 1] + 1) || (last && len != kv)) {
        return broken(5, "row lengths step by one",
                      fmt::format("row_len[{}] = {} (request {}, kv_len {})", r, len, b, kv));
      }
      if (v.m.positions[i] != len - 1) {
        return broken(6, "positions",
                      fmt::format("positions[{}] = {}, row_len {}", r, v.m.positions[i], len));
      }
    } else if (len != 0 || v.m.row_topk_len[i] != 0 || v.m.positions[i] != 0 ||
               v.m.write_slot[i] != -1 || v.m.row_page[i] != 0) {
      return broken(
          8, "padded rows",
          fmt::format("row {}: len {}, topk {}, pos {}, slot {}, page row {}", r, len,
                      v.m.row_topk_len[i], v.m.positions[i], v.m.write_slot[i], v.m.row_page[i]));
    }
  }
  for (int32_t b = v.B; b < v.B_pad; ++b) {
    if (v.m.req_slot[v.z(b)] != 0 || v.m.req_kv_len[v.z(b)] != 0) {
      return broken(8, "padded requests",
                    fmt::format("request {}: req_slot {}, kv_len {}", b, v.m.req_slot[v.z(b)],
                                v.m.req_kv_len[v.z(b)]));
    }
  }
  return ok_status();
}

Status inv7_inv9_slots(const View& v) {
  std::unordered_set<int32_t> seen_slots, seen_reqs;
  for (int32_t b = 0; b < v.B; ++b) {
    const int32_t s = v.m.req_slot[v.z(b)];
    if (s < 1 || s >= v.pt.num_rows || !seen_reqs.insert(s).second) {
      return broken(9, "request slots", fmt::format("req_slot[{}] = {}", b, s));
    }
  }
  for (int32_t r = 0; r < v.rows; ++r) {
    const size_t i = v.z(r);
    if (v.m.row_page[i] != v.m.req_slot[v.z(v.m.row_req[i])]) {
      return broken(9, "row page",
                    fmt::format("row_page[{}] = {}, req_slot = {}", r, v.m.row_page[i],
                                v.m.req_slot[v.z(v.m.row_req[i])]));
    }
    const int32_t pos = v.m.positions[i];
    const int32_t page = v.pt.data[int64_t{v.m.row_page[i]} * v.pt.width + pos / kPageSize];
    const int32_t expect = page * kPageSize + pos % kPageSize;
    const int32_t slot = v.m.write_slot[i];
    if (slot != expect || slot < kPageSize ||
        int64_t{slot} >= int64_t{v.pt.num_pages} * kPageSize || !seen_slots.insert(slot).second) {
      return broken(7, "write slots",
                    fmt::format("write_slot[{}] = {} (page table gives {})", r, slot, expect));
    }
  }
  return ok_status();
}

Status inv10_page_table(const View& v) {
  for (int32_t c = 0; c < v.pt.width; ++c) {
    if (v.pt.data[c] != 0)
      return broken(10, "page table", fmt::format("row 0 entry {} = {}", c, v.pt.data[c]));
  }
  for (int64_t i = 0; i < int64_t{v.pt.num_rows} * v.pt.width; ++i) {
    if (v.pt.data[i] < 0 || v.pt.data[i] >= v.pt.num_pages) {
      return broken(
          10, "page table",
          fmt::format("entry [{}][{}] = {}", i / v.pt.width, i % v.pt.width, v.pt.data[i]));
    }
  }
  for (int32_t b = 0; b < v.B; ++b) {
    const int32_t s = v.m.req_slot[v.z(b)];
    const int32_t pages = (v.m.req_kv_len[v.z(b)] + kPageSize - 1) / kPageSize;
    for (int32_t c = 0; c < pages; ++c) {
      if (v.pt.data[int64_t{s} * v.pt.width + c] < 1) {
        return broken(10, "page table",
                      fmt::format("request {} (row {}) entry {} = 0 below kv_len", b, s, c));
      }
    }
  }
  return ok_status();
}

Status inv12_extend_paths(const View& v) {
  if (v.uniform) {
    if (v.h.paged_requests != 0 || v.m.cu_kv[v.z(v.B_pad)] != 0) {
      return broken(12, "uniform modes read the pool", "paged sub-batch or gathered keys present");
    }
    for (int32_t r = 0; r < v.rows_pad; ++r) {
      if (v.m.ks[v.z(r)] != 0 || v.m.ke[v.z(r)] != 0)
        return broken(12, "ks/ke", fmt::format("row {}", r));
    }
    return ok_status();
  }
  const int32_t limit = v.c.max_rows_per_request(), n_pg = v.h.paged_rows_per_req;
  int32_t i = 0;
  for (int32_t b = 0; b < v.B; ++b) {
    const int32_t first = v.m.cu_q[v.z(b)], new_len = v.m.cu_q[v.z(b + 1)] - first;
    const int32_t kv_step = v.m.cu_kv[v.z(b + 1)] - v.m.cu_kv[v.z(b)];
    if (new_len <= limit) {
      if (i >= v.h.paged_requests || v.m.pg_req_slot[v.z(i)] != v.m.req_slot[v.z(b)] ||
          kv_step != 0 || new_len > n_pg) {
        return broken(12, "paged sub-batch", fmt::format("request {} (sub-batch entry {})", b, i));
      }
      for (int32_t j = 0; j < n_pg; ++j) {
        const size_t k = v.z(i * n_pg + j);
        const bool real = j < new_len;
        if (v.m.pg_row_len[k] != (real ? v.m.row_len[v.z(first + j)] : 0) ||
            v.m.pg_row[k] != (real ? first + j : -1)) {
          return broken(12, "paged sub-batch",
                        fmt::format("pg row {} of request {}", i * n_pg + j, b));
        }
        if (real && (v.m.ks[v.z(first + j)] != 0 || v.m.ke[v.z(first + j)] != 0)) {
          return broken(12, "paged rows have ks = ke = 0", fmt::format("row {}", first + j));
        }
      }
      ++i;
    } else {
      if (kv_step != v.m.req_kv_len[v.z(b)])
        return broken(12, "ragged cu_kv", fmt::format("request {}", b));
      for (int32_t r = first; r < first + new_len; ++r) {
        const int32_t ks = v.m.ks[v.z(r)], ke = v.m.ke[v.z(r)];
        if (ks != v.m.cu_kv[v.z(b)] || ke != ks + v.m.row_len[v.z(r)] ||
            ke > v.m.cu_kv[v.z(b + 1)]) {
          return broken(12, "ragged ks/ke", fmt::format("row {}: ks {}, ke {}", r, ks, ke));
        }
      }
    }
  }
  if (i != v.h.paged_requests)
    return broken(12, "paged sub-batch", fmt::format("B_pg = {}, found {}", v.h.paged_requests, i));
  return ok_status();
}

Status inv19_no_negatives(const View& v) {
  auto check = [&](const std::vector<int32_t>& a, size_t count, std::string_view name,
                   bool sentinel) -> Status {
    for (size_t i = 0; i < count; ++i) {
      if (a[i] < 0 && !(sentinel && a[i] == -1))
        return broken(19, "no negative values", fmt::format("{}[{}] = {}", name, i, a[i]));
    }
    return ok_status();
  };
  const size_t rp = v.z(v.rows_pad), bp = v.z(v.B_pad);
  DSA_RETURN_IF_ERROR(check(v.m.row_len, rp, "row_len", false));
  DSA_RETURN_IF_ERROR(check(v.m.row_topk_len, rp, "row_topk_len", false));
  DSA_RETURN_IF_ERROR(check(v.m.row_req, rp, "row_req", false));
  DSA_RETURN_IF_ERROR(check(v.m.row_page, rp, "row_page", false));
  DSA_RETURN_IF_ERROR(check(v.m.positions, rp, "positions", false));
  DSA_RETURN_IF_ERROR(check(v.m.write_slot, rp, "write_slot", true));
  DSA_RETURN_IF_ERROR(check(v.m.ks, rp, "ks", false));
  DSA_RETURN_IF_ERROR(check(v.m.ke, rp, "ke", false));
  DSA_RETURN_IF_ERROR(check(v.m.req_slot, bp, "req_slot", false));
  DSA_RETURN_IF_ERROR(check(v.m.req_kv_len, bp, "req_kv_len", false));
  DSA_RETURN_IF_ERROR(check(v.m.cu_q, bp + 1, "cu_q", false));
  DSA_RETURN_IF_ERROR(check(v.m.cu_kv, bp + 1, "cu_kv", false));
  DSA_RETURN_IF_ERROR(check(v.m.sample_row, v.m.sample_row.size(), "sample_row", true));
  const size_t pg = v.z(int64_t{v.h.paged_requests} * v.h.paged_rows_per_req);
  DSA_RETURN_IF_ERROR(check(v.m.pg_row_len, pg, "pg_row_len", false));
  return check(v.m.pg_row, pg, "pg_row", true);
}

Status inv14_header(const View& v, const std::optional<ForwardKey>& expected) {
  const MetadataHeader& h = v.h;
  if (h.magic != kMetadataMagic) return broken(14, "header", fmt::format("magic {:#x}", h.magic));
  if (h.topk != v.c.topk || h.page_table_width != v.c.page_table_width) {
    return broken(14, "header",
                  fmt::format("K {} / W {} differ from the config {} / {}", h.topk,
                              h.page_table_width, v.c.topk, v.c.page_table_width));
  }
  if (expected &&
      (expected->model != h.model || expected->mode != h.mode ||
       expected->batch_pad != h.batch_pad || expected->rows_per_request != h.rows_per_request)) {
    return broken(
        14, "header",
        fmt::format("built for ({}, {}, B_pad {}, n {}), consumed as ({}, {}, B_pad {}, n {})",
                    model_name(h.model), mode_name(h.mode), h.batch_pad, h.rows_per_request,
                    model_name(expected->model), mode_name(expected->mode), expected->batch_pad,
                    expected->rows_per_request));
  }
  return ok_status();
}

}  // namespace

Status validate_forward_metadata(const ForwardMetadata& m, const MetadataConfig& config,
                                 const kernels::PageTable& pt, std::optional<ForwardKey> expected) {
  const MetadataHeader& h = m.header;
  View v{
      m,      config,    pt, h, is_uniform(h.mode), h.num_requests, h.batch_pad, h.rows_per_request,
      h.rows, h.rows_pad};
  DSA_RETURN_IF_ERROR(inv14_header(v, expected));
  DSA_RETURN_IF_ERROR(inv13_capacities(v));
  DSA_RETURN_IF_ERROR(inv11_prefix_sums(v));
  DSA_RETURN_IF_ERROR(inv1_inv2_rows(v));
  DSA_RETURN_IF_ERROR(inv19_no_negatives(v));
  DSA_RETURN_IF_ERROR(inv3_to_8_rows(v));
  DSA_RETURN_IF_ERROR(inv7_inv9_slots(v));
  DSA_RETURN_IF_ERROR(inv10_page_table(v));
  DSA_RETURN_IF_ERROR(inv12_extend_paths(v));
  Status s = validate_metadata_schedule(config, m);
  if (!s.ok()) return broken(15, "schedule derived from this forward's lengths", s.message());
  return ok_status();
}

}  // namespace dsa::runtime
