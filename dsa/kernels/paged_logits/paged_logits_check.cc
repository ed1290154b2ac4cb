#include "dsa/kernels/paged_logits/paged_logits_check.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {

namespace {
// e4m3 values are multiples of 2^-9 below 2^9, so code * 2^9 is an exact integer and a 128-term
// dot product of two of them is an exact int64 (scaled by 2^-18).
int64_t e4m3_times_512(uint8_t code) {
  return static_cast<int64_t>(e4m3_to_float(e4m3{code}) * 512.0f);
}

struct Expected {
  double value, magnitude;  // the logit and M of §3b
};

// Independent formulation: byte arithmetic of §2.2 written out, integer dots, heads summed in
// descending order in long double.
Expected independent_logit(const uint8_t* pool, const int32_t* table_row, int32_t s,
                           const uint8_t* q, const float* w, int32_t heads) {
  const int32_t page = table_row[s / 64], o = s % 64;
  const uint8_t* base = pool + int64_t{page} * 64 * 132;
  float kscale;
  std::memcpy(&kscale, base + 64 * 128 + 4 * o, 4);
  long double sum = 0, mag = 0;
  for (int32_t h = heads - 1; h >= 0; --h) {
    int64_t dot = 0, abs_dot = 0;
    for (int32_t t = 0; t < 128; ++t) {
      const int64_t prod = e4m3_times_512(q[h * 128 + t]) * e4m3_times_512(base[o * 128 + t]);
      dot += prod;
      abs_dot += prod < 0 ? -prod : prod;
    }
    sum += static_cast<long double>(w[h]) * static_cast<long double>(dot > 0 ? dot : 0);
    mag += std::fabs(static_cast<long double>(w[h])) * static_cast<long double>(abs_dot);
  }
  const long double scale = static_cast<long double>(kscale) / 262144.0L;  // 2^-18
  return {static_cast<double>(sum * scale), static_cast<double>(mag * std::fabs(scale))};
}
}  // namespace

Status check_paged_logits(PagedLogitsFn op, LogitsScheduleFn build_schedule, int32_t batch,
                          int32_t n, int32_t heads, int32_t context_len, uint64_t seed) {
  if (batch < 1 || n < 1 || n > 8 || context_len < n) {
    return invalid_argument(
        fmt::format("check_paged_logits: batch = {}, n = {}, context_len = {}: need batch >= 1, "
                    "1 <= n <= 8, context_len >= n",
                    batch, n, context_len));
  }
  ScopedCheckedMode checked(true);
  testing::Rng rng(seed);
  const int32_t W = (context_len + kPageSize - 1) / kPageSize;
  const int32_t num_pages = batch * W + 1, rows = batch * n;
  testing::IndexerPoolBuffer pool(num_pages);
  pool.fill_random(rng);
  testing::PageTableBuffer table(batch + 1, W, num_pages);
  std::vector<int32_t> free_pages = rng.permutation(1, num_pages);  // scattered, out of order
  std::vector<int32_t> req_slot(size_t(batch), 0), row_len(size_t(rows), 0);
  std::vector<int32_t> table_rows = rng.permutation(1, batch + 1);
  for (int32_t b = 0; b < batch; ++b) {
    if (b > 0 && rng.randint(0, 3) == 0) continue;  // padded request: req_slot 0, lengths 0
    const auto c = b == 0 ? context_len - n : static_cast<int32_t>(rng.randint(0, context_len - n));
    req_slot[size_t(b)] = table_rows[size_t(b)];
    table.assign(req_slot[size_t(b)], c + n, free_pages);
    for (int32_t j = 0; j < n; ++j) row_len[size_t(b) * n + j] = c + j + 1;
  }
  std::vector<uint8_t> q = rng.e4m3_vector(size_t(rows) * heads * kIndexHeadDim);
  std::vector<float> w(size_t(rows) * heads);
  for (auto& v : w) v = rng.normal(0.f, 0.05f);

  const int32_t G = 16;
  std::vector<int32_t> schedule(size_t(logits_schedule_words(G)));
  LogitsScheduleParams sp{row_len.data(),
                          batch,
                          n,
                          G,
                          W,
                          kPageSize,
                          schedule.data(),
                          static_cast<int32_t>(schedule.size())};
  DSA_RETURN_IF_ERROR(build_schedule(sp));

  const int64_t ld = (int64_t{W} * kPageSize + 255) / 256 * 256;
  std::vector<float> logits(size_t(rows) * ld, 0.f);
  PagedLogitsParams p;
  p.q = q.data();
  p.w = w.data();
  p.row_len = row_len.data();
  p.req_slot = req_slot.data();
  p.page_table = table.table();
  p.pool = pool.pool();
  p.schedule = schedule.data();
  p.schedule_words = static_cast<int32_t>(schedule.size());
  p.batch_pad = batch;
  p.rows_per_request = n;
  p.num_heads = heads;
  p.num_consumers = G;
  p.logits = logits.data();
  p.logits_ld = ld;
  p.logits_rows = rows;
  DSA_RETURN_IF_ERROR(op(p));

  const auto pt = table.table();
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t len = row_len[size_t(r)];
    const bool subset = int64_t{len} * heads * kIndexHeadDim > (int64_t{1} << 22);
    for (int32_t s = 0; s < ld; ++s) {
      const float got = logits[size_t(r) * ld + s];
      if (s >= len) {
        if (!std::isnan(got)) {
          return internal_error(fmt::format(
              "check_paged_logits: logits[{}][{}] = {}: column >= row_len {} must be NaN (seed {})",
              r, s, got, len, seed));
        }
        continue;
      }
      if (subset && s >= 64 && s < len - 64 && s % 13 != 0) continue;
      const Expected e = independent_logit(
          pool.bytes().data(), pt.data + int64_t{req_slot[size_t(r / n)]} * W, s,
          q.data() + size_t(r) * heads * kIndexHeadDim, w.data() + size_t(r) * heads, heads);
      // Both sides are exact up to the final fp32 rounding: allow 2^-21 M (a few fp32 ulps).
      if (!(std::fabs(double{got} - e.value) <= std::ldexp(e.magnitude, -21) + 1e-30)) {
        return internal_error(
            fmt::format("check_paged_logits: logits[{}][{}] = {}, independent {} (M = {}, seed {})",
                        r, s, got, e.value, e.magnitude, seed));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
