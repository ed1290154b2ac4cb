#include <fmt/format.h>

#include <cstring>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/gather/gather.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kIndexerOp = "indexer_gather";
constexpr std::string_view kLatentOp = "latent_gather";

// What both gathers share: where rows come from (§3h), independent of the pool format.
struct Source {
  std::string_view op;
  const int32_t* req_slot;
  const int32_t* cu_kv;
  PageTable table;
  int32_t num_pages, batch_pad, capacity;
};

Status validate_source(const Source& s) {
  DSA_RETURN_IF_ERROR(require_in(s.op, "batch_pad", s.batch_pad, 0, INT32_MAX - 1));
  DSA_RETURN_IF_ERROR(require_in(s.op, "capacity", s.capacity, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_pointer(s.op, "cu_kv", s.cu_kv));
  DSA_RETURN_IF_ERROR(require_in(s.op, "pool.num_pages", s.num_pages, 1, INT32_MAX / kPageSize));
  DSA_RETURN_IF_ERROR(require_eq(s.op, "page_table.num_pages", s.table.num_pages, s.num_pages));
  DSA_RETURN_IF_ERROR(
      require_in(s.op, "page_table.width", s.table.width, 1, INT32_MAX / kPageSize));
  DSA_RETURN_IF_ERROR(require_in(s.op, "page_table.num_rows", s.table.num_rows, 1, INT32_MAX));
  if (s.batch_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(s.op, "req_slot", s.req_slot));
  return require_pointer(s.op, "page_table.data", s.table.data);
}

int64_t max_len(const Source& s) { return int64_t{s.table.width} * kPageSize; }

// Capacity (always) and the checked-mode rules, all verified before anything is written.
Status check_data(const Source& s) {
  const int32_t total = s.cu_kv[s.batch_pad];
  if (total > s.capacity) {
    return resource_exhausted(fmt::format("{}: cu_kv[{}] = {} gathered rows: exceeds capacity {}",
                                          s.op, s.batch_pad, total, s.capacity));
  }
  if (!checked_mode()) return ok_status();
  if (s.cu_kv[0] != 0) {
    return element_error(StatusCode::kOutOfRange, s.op, "cu_kv", 0, s.cu_kv[0], "must be 0");
  }
  for (int32_t b = 0; b < s.batch_pad; ++b) {
    const int64_t len = int64_t{s.cu_kv[b + 1]} - s.cu_kv[b];
    if (len < 0) {
      return element_error(
          StatusCode::kOutOfRange, s.op, "cu_kv", b + 1, s.cu_kv[b + 1],
          fmt::format("must be >= cu_kv[{}] = {} (non-decreasing)", b, s.cu_kv[b]));
    }
    if (len == 0) continue;  // nothing of this request is read
    if (len > max_len(s)) {
      return out_of_range(fmt::format("{}: request {} gathers {} rows: must be <= W*P = {}", s.op,
                                      b, len, max_len(s)));
    }
    const int32_t row = s.req_slot[b];
    if (row < 0 || row >= s.table.num_rows) {
      return element_error(StatusCode::kOutOfRange, s.op, "req_slot", b, row,
                           fmt::format("must be in [0, R_slots = {})", s.table.num_rows));
    }
    for (int64_t i = 0; i < (len + kPageSize - 1) / kPageSize; ++i) {
      const int32_t page = s.table.data[int64_t{row} * s.table.width + i];
      if (page < 1 || page >= s.num_pages) {
        return out_of_range(
            fmt::format("{}: page_table[{}][{}] = {} (request {}): must be in [1, num_pages = {})",
                        s.op, row, i, page, b, s.num_pages));
      }
    }
  }
  return ok_status();
}

// Calls fn(out_row, slot) for every gathered row, with the unchecked neutralisation of §3h (a
// no-op for data that passed check_data).
template <class F>
void for_each_row(const Source& s, F&& fn) {
  const int32_t total = s.cu_kv[s.batch_pad] < 0 ? 0 : s.cu_kv[s.batch_pad];
  auto clamp = [](int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); };
  for (int32_t b = 0; b < s.batch_pad; ++b) {
    const int32_t begin = clamp(s.cu_kv[b], 0, total);
    const int32_t end = clamp(s.cu_kv[b + 1], begin, total);
    if (begin == end) continue;
    int32_t row = s.req_slot[b];
    if (row < 0 || row >= s.table.num_rows) row = 0;
    for (int32_t pos = 0; pos < end - begin; ++pos) {
      int32_t page = 0;
      if (pos < max_len(s)) page = s.table.data[int64_t{row} * s.table.width + pos / kPageSize];
      if (page < 0 || page >= s.num_pages) page = 0;
      fn(begin + pos, page * kPageSize + pos % kPageSize);
    }
  }
}
}  // namespace

Status validate(const IndexerGatherParams& p) {
  DSA_RETURN_IF_ERROR(validate_source(
      {kIndexerOp, p.req_slot, p.cu_kv, p.page_table, p.pool.num_pages, p.batch_pad, p.capacity}));
  DSA_RETURN_IF_ERROR(require_eq(kIndexerOp, "pool.head_dim", p.pool.head_dim, kIndexHeadDim));
  DSA_RETURN_IF_ERROR(require_eq(kIndexerOp, "pool.page_size", p.pool.page_size, kPageSize));
  DSA_RETURN_IF_ERROR(require_eq(kIndexerOp, "pool.page_stride_bytes", p.pool.page_stride_bytes,
                                 indexer_page_bytes(p.pool.page_size, p.pool.head_dim)));
  if (p.batch_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kIndexerOp, "pool.data", p.pool.data));
  DSA_RETURN_IF_ERROR(require_pointer(kIndexerOp, "k8", p.k8));
  return require_pointer(kIndexerOp, "kscale", p.kscale);
}

Status validate(const LatentGatherParams& p) {
  DSA_RETURN_IF_ERROR(validate_source(
      {kLatentOp, p.req_slot, p.cu_kv, p.page_table, p.pool.num_pages, p.batch_pad, p.capacity}));
  DSA_RETURN_IF_ERROR(require_eq(kLatentOp, "pool.page_size", p.pool.page_size, kPageSize));
  if (p.pool.format != LatentFormat::kBf16 && p.pool.format != LatentFormat::kFp8_656) {
    return field_error(StatusCode::kInvalidArgument, kLatentOp, "pool.format",
                       static_cast<int64_t>(p.pool.format), "must be bf16 or FP8-656");
  }
  if (p.batch_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kLatentOp, "pool.data", p.pool.data));
  return require_pointer(kLatentOp, "kv", p.kv);
}

Status indexer_gather_ref(const IndexerGatherParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.batch_pad == 0) return ok_status();  // S = cu_kv[0]: nothing to gather
  const Source s{kIndexerOp,       p.req_slot,  p.cu_kv,   p.page_table,
                 p.pool.num_pages, p.batch_pad, p.capacity};
  DSA_RETURN_IF_ERROR(check_data(s));
  const int32_t d = p.pool.head_dim;
  for_each_row(s, [&](int32_t out, int32_t slot) {
    std::memcpy(p.k8 + int64_t{out} * d, p.pool.data + indexer_value_offset(p.pool, slot),
                static_cast<size_t>(d));
    std::memcpy(p.kscale + out, p.pool.data + indexer_scale_offset(p.pool, slot), sizeof(float));
  });
  return ok_status();
}

Status latent_gather_ref(const LatentGatherParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.batch_pad == 0) return ok_status();
  const Source s{kLatentOp,        p.req_slot,  p.cu_kv,   p.page_table,
                 p.pool.num_pages, p.batch_pad, p.capacity};
  DSA_RETURN_IF_ERROR(check_data(s));
  for_each_row(s, [&](int32_t out, int32_t slot) {
    bf16* dst = p.kv + int64_t{out} * kQkDim;
    if (p.pool.format == LatentFormat::kBf16) {  // a verbatim copy, NaN payloads included
      std::memcpy(dst, p.pool.data + latent_row_offset(p.pool, slot), kBf16LatentBytes);
      return;
    }
    // Dequantised values are float(q) * 2^e: exact in bf16, so the rounding below is exact.
    float row[kQkDim];
    load_latent_row(p.pool, slot, row);
    for (int32_t t = 0; t < kQkDim; ++t) dst[t] = float_to_bf16(row[t]);
  });
  return ok_status();
}

}  // namespace dsa::kernels
