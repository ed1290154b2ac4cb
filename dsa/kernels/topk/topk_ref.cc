#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/topk/topk.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "topk";

int32_t col_base_of(const TopkParams& p, int32_t r) { return p.col_base ? p.col_base[r] : 0; }
int32_t out_row_of(const TopkParams& p, int32_t r) { return p.out_row ? p.out_row[r] : r; }
int64_t pages_covering(int64_t len, int32_t page_size) { return (len + page_size - 1) / page_size; }

// ---- checked mode: every rule verified before anything is written --------------------------

Status check_out_rows(const TopkParams& p) {
  std::vector<int32_t> first_writer(static_cast<size_t>(p.out_rows), -1);
  for (int32_t r = 0; r < p.rows; ++r) {
    int32_t o = out_row_of(p, r);
    if (o == -1) continue;
    if (o < 0 || o >= p.out_rows) {
      return element_error(StatusCode::kOutOfRange, kOp, "out_row", r, o,
                           fmt::format("must be -1 or in [0, out_rows = {})", p.out_rows));
    }
    if (first_writer[o] != -1) {
      return element_error(
          StatusCode::kOutOfRange, kOp, "out_row", r, o,
          fmt::format("repeats out_row[{}]: entries must be distinct", first_writer[o]));
    }
    first_writer[o] = r;
  }
  return ok_status();
}

// The page ids the paged variant may translate for row r: those covering [0, len).
Status check_pages(const TopkParams& p, int32_t r, int32_t o, int32_t len) {
  const PageTable& pt = p.page_table;
  int32_t row = p.row_page[o];
  if (row < 0 || row >= pt.num_rows) {
    return element_error(StatusCode::kOutOfRange, kOp, "row_page", o, row,
                         fmt::format("must be in [0, page_table.num_rows = {})", pt.num_rows));
  }
  int64_t pages = pages_covering(len, p.page_size);
  if (pages > pt.width) {
    return element_error(
        StatusCode::kOutOfRange, kOp, "len", r, len,
        fmt::format("needs {} pages, more than page_table.width = {}", pages, pt.width));
  }
  for (int64_t j = 0; j < pages; ++j) {
    int32_t id = pt.data[int64_t{row} * pt.width + j];
    if (id < 1 || id >= pt.num_pages) {
      return out_of_range(fmt::format(
          "{}: page_table[{}][{}] = {}: page ids read must be in [1, num_pages = {}) (row {})", kOp,
          row, j, id, pt.num_pages, r));
    }
  }
  return ok_status();
}

Status check_row(const TopkParams& p, int32_t r) {
  int32_t len = p.len[r], base = col_base_of(p, r);
  if (len < 0) return element_error(StatusCode::kOutOfRange, kOp, "len", r, len, "must be >= 0");
  if (base < 0) {
    return element_error(StatusCode::kOutOfRange, kOp, "col_base", r, base, "must be >= 0");
  }
  if (int64_t{base} + len > p.logits_ld) {
    return element_error(StatusCode::kOutOfRange, kOp, "len", r, len,
                         fmt::format("col_base + len = {} exceeds logits_ld = {}",
                                     int64_t{base} + len, p.logits_ld));
  }
  int32_t o = out_row_of(p, r);
  if (p.variant == TopkVariant::kPaged && o != -1) DSA_RETURN_IF_ERROR(check_pages(p, r, o, len));
  if (p.variant == TopkVariant::kRagged) {
    int32_t off = p.offset[r];
    if (off < 0 || int64_t{off} + len > INT32_MAX) {
      return element_error(StatusCode::kOutOfRange, kOp, "offset", r, off,
                           fmt::format("must be >= 0 with offset + len[{}] = {} <= INT32_MAX", r,
                                       int64_t{off} + len));
    }
  }
  return ok_status();
}

Status check_data(const TopkParams& p) {
  DSA_RETURN_IF_ERROR(check_out_rows(p));
  for (int32_t r = 0; r < p.rows; ++r) DSA_RETURN_IF_ERROR(check_row(p, r));
  return ok_status();
}

// ---- unchecked neutralisation ---------------------------------------------------------------

// The idx row each input row writes, -1 for none: out-of-range targets dropped, and of repeated
// targets only the last row kept, so the parallel writes below never race.
std::vector<int32_t> target_rows(const TopkParams& p) {
  std::vector<int32_t> target(static_cast<size_t>(p.rows));
  std::vector<bool> taken(static_cast<size_t>(p.out_rows), false);
  for (int32_t r = p.rows - 1; r >= 0; --r) {
    int32_t o = out_row_of(p, r);
    bool in_range = o >= 0 && o < p.out_rows;
    target[r] = (in_range && !taken[o]) ? o : -1;
    if (in_range) taken[o] = true;
  }
  return target;
}

// Columns [base, base + len) of a row, signed lengths clamped into the buffer (equal to the given
// ones whenever the checked rules hold).
struct Window {
  int64_t base;
  int32_t len;
};
Window row_window(const TopkParams& p, int32_t r) {
  int64_t base = std::clamp<int64_t>(col_base_of(p, r), 0, p.logits_ld);
  int64_t len = std::clamp<int64_t>(p.len[r], 0, p.logits_ld - base);
  return {base, static_cast<int32_t>(len)};
}

// ---- selection ------------------------------------------------------------------------------

// The §3e total order: a ranks before b iff v_a > v_b, or v_a = v_b and a < b, where every NaN is
// below -inf and equal to other NaNs, and -0 == +0 (IEEE comparison already says so).
bool ranks_before(const float* v, int32_t a, int32_t b) {
  bool nan_a = std::isnan(v[a]), nan_b = std::isnan(v[b]);
  if (nan_a != nan_b) return nan_b;
  if (!nan_a && v[a] != v[b]) return v[a] > v[b];
  return a < b;
}

// The first min(len, K) positions of the order, in ascending position order. The order is total
// (positions break every tie), so nth_element's partition is exactly the selected set.
void select_positions(const float* v, int32_t len, int32_t k, std::vector<int32_t>& pos) {
  pos.resize(static_cast<size_t>(len));
  std::iota(pos.begin(), pos.end(), 0);
  if (len <= k) return;  // trivial row: every visible position
  std::nth_element(pos.begin(), pos.begin() + k, pos.end(),
                   [v](int32_t a, int32_t b) { return ranks_before(v, a, b); });
  pos.resize(static_cast<size_t>(k));
  std::sort(pos.begin(), pos.end());
}

int32_t paged_slot(const TopkParams& p, int32_t o, int32_t pos) {
  const PageTable& pt = p.page_table;
  int32_t row = p.row_page[o];
  if (row < 0 || row >= pt.num_rows) row = 0;  // the reserved row: every entry is page 0
  int32_t j = pos / p.page_size, id = 0;
  if (j < pt.width) id = pt.data[int64_t{row} * pt.width + j];
  if (id < 0 || id >= pt.num_pages) id = 0;
  return id * p.page_size + pos % p.page_size;
}

int32_t image(const TopkParams& p, int32_t r, int32_t o, int32_t pos) {
  switch (p.variant) {
    case TopkVariant::kPlain:
      return pos;
    case TopkVariant::kPaged:
      return paged_slot(p, o, pos);
    case TopkVariant::kRagged:  // wraps instead of overflowing (only reachable unchecked)
      return static_cast<int32_t>(static_cast<uint32_t>(p.offset[r]) + static_cast<uint32_t>(pos));
  }
  return -1;
}
}  // namespace

Status validate(const TopkParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "rows", p.rows, 0, INT32_MAX));
  if (p.k < kMinTopk || p.k > kMaxTopk || p.k % kTopkMultiple != 0) {
    return field_error(
        StatusCode::kInvalidArgument, kOp, "k", p.k,
        fmt::format("must be in [{}, {}] and a multiple of {}", kMinTopk, kMaxTopk, kTopkMultiple));
  }
  if (p.logits_ld < 0 || p.logits_ld % 4 != 0) {
    return field_error(StatusCode::kInvalidArgument, kOp, "logits_ld", p.logits_ld,
                       "must be >= 0 and a multiple of 4");
  }
  if (reinterpret_cast<uintptr_t>(p.logits) % 16 != 0) {
    return field_error(StatusCode::kInvalidArgument, kOp, "logits address mod 16",
                       int64_t(reinterpret_cast<uintptr_t>(p.logits) % 16),
                       "must be 0 (16-byte aligned rows)");
  }
  DSA_RETURN_IF_ERROR(require_in(kOp, "out_rows", p.out_rows, 0, INT32_MAX));
  if (p.max_chunk < 512 || p.max_chunk > kTopkMaxChunk || p.max_chunk % 128 != 0) {
    return field_error(StatusCode::kInvalidArgument, kOp, "max_chunk", p.max_chunk,
                       fmt::format("must be in [512, {}] and a multiple of 128", kTopkMaxChunk));
  }
  if (p.cluster_size != 0 && p.cluster_size != 1 && p.cluster_size != 2 && p.cluster_size != 4 &&
      p.cluster_size != 8) {
    return field_error(StatusCode::kInvalidArgument, kOp, "cluster_size", p.cluster_size,
                       "must be 0 (automatic), 1, 2, 4 or 8");
  }
  DSA_RETURN_IF_ERROR(require_in(kOp, "stream_min_rows", p.stream_min_rows, -1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "long_row_min_len", p.long_row_min_len, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "cluster_max_rows", p.cluster_max_rows, 0, INT32_MAX));
  if (p.out_row == nullptr && p.rows > p.out_rows) {
    return field_error(StatusCode::kInvalidArgument, kOp, "rows", p.rows,
                       fmt::format("exceeds out_rows = {} (the capacity of idx)", p.out_rows));
  }
  switch (p.variant) {
    case TopkVariant::kPlain:
      break;
    case TopkVariant::kPaged:
      DSA_RETURN_IF_ERROR(require_pointer(kOp, "page_table.data", p.page_table.data));
      DSA_RETURN_IF_ERROR(require_pointer(kOp, "row_page", p.row_page));
      DSA_RETURN_IF_ERROR(require_eq(kOp, "page_size", p.page_size, kPageSize));
      DSA_RETURN_IF_ERROR(require_in(kOp, "page_table.width", p.page_table.width, 1, INT32_MAX));
      DSA_RETURN_IF_ERROR(
          require_in(kOp, "page_table.num_rows", p.page_table.num_rows, 1, INT32_MAX));
      DSA_RETURN_IF_ERROR(require_in(kOp, "page_table.num_pages", p.page_table.num_pages, 1,
                                     INT32_MAX / kPageSize));
      break;
    case TopkVariant::kRagged:
      DSA_RETURN_IF_ERROR(require_pointer(kOp, "offset", p.offset));
      break;
    default:
      return field_error(StatusCode::kInvalidArgument, kOp, "variant",
                         static_cast<int64_t>(p.variant), "must be kPlain, kPaged or kRagged");
  }
  if (p.rows == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "logits", p.logits));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "len", p.len));
  return require_pointer(kOp, "idx", p.idx);
}

Status topk_ref(const TopkParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.plan != nullptr) {
    DSA_RETURN_IF_ERROR(validate_topk_plan_header(*p.plan, p.len, p.rows, p.k));
  }
  if (checked_mode()) DSA_RETURN_IF_ERROR(check_data(p));
  const std::vector<int32_t> target = target_rows(p);
  parallel_for(p.rows, [&](int64_t row) {
    const int32_t r = static_cast<int32_t>(row), o = target[r];
    if (o < 0) return;
    const Window w = row_window(p, r);
    std::vector<int32_t> pos;
    select_positions(p.logits + int64_t{r} * p.logits_ld + w.base, w.len, p.k, pos);
    int32_t* out = p.idx + int64_t{o} * p.k;
    const int32_t m = static_cast<int32_t>(pos.size());
    for (int32_t i = 0; i < m; ++i) out[i] = image(p, r, o, pos[i]);
    std::fill(out + m, out + p.k, -1);
  });
  return ok_status();
}

}  // namespace dsa::kernels
