#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/mqa_logit.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "paged_logits";

int64_t max_len(const PagedLogitsParams& p) {
  return int64_t{p.page_table.width} * p.pool.page_size;
}

// Checked-mode device-data rules (§3b), all verified before anything is written.
Status check_data(const PagedLogitsParams& p) {
  const int32_t n = p.rows_per_request, P = p.pool.page_size, W = p.page_table.width;
  for (int64_t r = 0; r < int64_t{p.batch_pad} * n; ++r) {
    if (p.row_len[r] < 0 || p.row_len[r] > max_len(p)) {
      return element_error(StatusCode::kOutOfRange, kOp, "row_len", r, p.row_len[r],
                           fmt::format("must be in [0, W*P = {}]", max_len(p)));
    }
  }
  for (int32_t b = 0; b < p.batch_pad; ++b) {
    const int32_t len = schedule_stream_length(p.row_len, b, n, W, P);
    if (len == 0) continue;  // nothing of this request is read
    const int32_t row = p.req_slot[b];
    if (row < 0 || row >= p.page_table.num_rows) {
      return element_error(StatusCode::kOutOfRange, kOp, "req_slot", b, row,
                           fmt::format("must be in [0, R_slots = {})", p.page_table.num_rows));
    }
    for (int32_t i = 0; i < (len + P - 1) / P; ++i) {
      const int32_t page = p.page_table.data[int64_t{row} * W + i];
      if (page < 1 || page >= p.pool.num_pages) {
        return out_of_range(fmt::format(
            "{}: page_table[{}][{}] = {} (request {}, L_b = {}): must be in [1, num_pages = {})",
            kOp, row, i, page, b, len, p.pool.num_pages));
      }
    }
  }
  return ok_status();
}

// The row's length and page-table row as the kernel uses them: in checked mode they already
// satisfy the contract; unchecked they are neutralised here (§3b).
int32_t effective_len(const PagedLogitsParams& p, int64_t r) {
  const int64_t len = p.row_len[r];
  return static_cast<int32_t>(len < 0 ? 0 : (len > max_len(p) ? max_len(p) : len));
}
int32_t effective_row(const PagedLogitsParams& p, int32_t b) {
  const int32_t row = p.req_slot[b];
  return row < 0 || row >= p.page_table.num_rows ? 0 : row;
}
// Slot of position s of page-table row `row`; a page id outside [0, num_pages) reads page 0.
int32_t effective_slot(const PagedLogitsParams& p, int32_t row, int32_t s) {
  const int32_t P = p.pool.page_size;
  int32_t page = p.page_table.data[int64_t{row} * p.page_table.width + s / P];
  if (page < 0 || page >= p.pool.num_pages) page = 0;
  return page * P + s % P;
}

// Visits every defined column of row r with its decoded key (fn(s, key, kscale)).
template <class F>
void for_each_key(const PagedLogitsParams& p, int64_t r, F&& fn) {
  const int32_t row = effective_row(p, static_cast<int32_t>(r / p.rows_per_request));
  const int32_t len = effective_len(p, r);
  std::vector<double> key(size_t(p.pool.head_dim));
  for (int32_t s = 0; s < len; ++s) {
    const int32_t slot = effective_slot(p, row, s);
    decode_e4m3(p.pool.data + indexer_value_offset(p.pool, slot), p.pool.head_dim, key.data());
    float kscale;
    std::memcpy(&kscale, p.pool.data + indexer_scale_offset(p.pool, slot), sizeof(kscale));
    fn(s, key.data(), kscale);
  }
}

std::vector<double> decoded_q(const PagedLogitsParams& p, int64_t r) {
  const int64_t count = int64_t{p.num_heads} * p.pool.head_dim;
  std::vector<double> q(static_cast<size_t>(count));
  decode_e4m3(p.q + r * count, count, q.data());
  return q;
}
}  // namespace

Status validate(const PagedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "batch_pad", p.batch_pad, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "rows_per_request", p.rows_per_request, 1, 8));
  if (p.num_heads != 16 && p.num_heads != 32 && p.num_heads != 64) {
    return field_error(StatusCode::kInvalidArgument, kOp, "num_heads", p.num_heads,
                       "must be 16, 32 or 64");
  }
  DSA_RETURN_IF_ERROR(require_eq(kOp, "pool.head_dim", p.pool.head_dim, kIndexHeadDim));
  DSA_RETURN_IF_ERROR(require_eq(kOp, "pool.page_size", p.pool.page_size, kPageSize));
  DSA_RETURN_IF_ERROR(require_eq(kOp, "pool.page_stride_bytes", p.pool.page_stride_bytes,
                                 indexer_page_bytes(p.pool.page_size, p.pool.head_dim)));
  DSA_RETURN_IF_ERROR(
      require_in(kOp, "pool.num_pages", p.pool.num_pages, 1, INT32_MAX / kPageSize));
  DSA_RETURN_IF_ERROR(
      require_eq(kOp, "page_table.num_pages", p.page_table.num_pages, p.pool.num_pages));
  DSA_RETURN_IF_ERROR(
      require_in(kOp, "page_table.width", p.page_table.width, 1, INT32_MAX / kPageSize));
  DSA_RETURN_IF_ERROR(require_in(kOp, "page_table.num_rows", p.page_table.num_rows, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_consumers", p.num_consumers, 1, (INT32_MAX - 12) / 2));
  DSA_RETURN_IF_ERROR(
      require_eq(kOp, "schedule_words", p.schedule_words, schedule_words_for(p.num_consumers)));
  if (p.logits_ld % 256 != 0 || p.logits_ld < max_len(p)) {
    return field_error(StatusCode::kInvalidArgument, kOp, "logits_ld", p.logits_ld,
                       fmt::format("must be a multiple of 256 and >= W*P = {}", max_len(p)));
  }
  const int64_t rows = int64_t{p.batch_pad} * p.rows_per_request;
  if (p.logits_rows < rows) {
    return field_error(StatusCode::kInvalidArgument, kOp, "logits_rows", p.logits_rows,
                       fmt::format("must be >= B_pad*n = {}", rows));
  }
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "schedule", p.schedule));
  if (p.batch_pad == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "q", p.q));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "w", p.w));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "row_len", p.row_len));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "req_slot", p.req_slot));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "page_table.data", p.page_table.data));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "pool.data", p.pool.data));
  return require_pointer(kOp, "logits", p.logits);
}

Status paged_logits_ref(const PagedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  DSA_RETURN_IF_ERROR(check_schedule_header(kOp, p.schedule, p.batch_pad, p.rows_per_request,
                                            p.num_consumers, p.page_table.width));
  if (p.batch_pad == 0) return ok_status();
  const bool checked = checked_mode();
  if (checked) {
    DSA_RETURN_IF_ERROR(
        check_schedule_hash(kOp, p.schedule, p.row_len, p.batch_pad, p.rows_per_request));
    DSA_RETURN_IF_ERROR(check_data(p));
  }
  // The reference needs no schedule to compute (§3b): every row over its own [0, row_len).
  parallel_for(int64_t{p.batch_pad} * p.rows_per_request, [&](int64_t r) {
    const std::vector<double> q = decoded_q(p, r);
    const float* w = p.w + r * p.num_heads;
    float* out = p.logits + r * p.logits_ld;
    for_each_key(p, r, [&](int32_t s, const double* key, float kscale) {
      out[s] = mqa_logit(q.data(), w, p.num_heads, p.pool.head_dim, key, kscale);
    });
    if (checked) {
      for (int64_t s = effective_len(p, r); s < p.logits_ld; ++s) {
        out[s] = std::numeric_limits<float>::quiet_NaN();
      }
    }
  });
  return ok_status();
}

float paged_logits_bound(const uint8_t* q, const float* w, int32_t heads, const uint8_t* k8,
                         float kscale) {
  std::vector<double> qd(size_t(heads) * kIndexHeadDim), kd(kIndexHeadDim);
  decode_e4m3(q, int64_t{heads} * kIndexHeadDim, qd.data());
  decode_e4m3(k8, kIndexHeadDim, kd.data());
  return mqa_logit_bound(qd.data(), w, heads, kIndexHeadDim, kd.data(), kscale);
}

Status paged_logits_bounds(const PagedLogitsParams& p, float* bound) {
  DSA_RETURN_IF_ERROR(validate(p));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "bound", bound));
  parallel_for(int64_t{p.batch_pad} * p.rows_per_request, [&](int64_t r) {
    const std::vector<double> q = decoded_q(p, r);
    float* out = bound + r * p.logits_ld;
    std::fill(out, out + p.logits_ld, 0.f);
    for_each_key(p, r, [&](int32_t s, const double* key, float kscale) {
      out[s] = mqa_logit_bound(q.data(), p.w + r * p.num_heads, p.num_heads, p.pool.head_dim, key,
                               kscale);
    });
  });
  return ok_status();
}

}  // namespace dsa::kernels
