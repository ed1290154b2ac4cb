#include "dsa/kernels/paged_logits_topk/paged_logits_topk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"

namespace dsa::kernels {

namespace {

// The §3e order as a sort key: NaN below everything, -0 == +0.
double order_value(float v) { return std::isnan(v) ? -HUGE_VAL : double(v) + 0.0; }

// Every row's logits by paged_logits_ref (its own schedule), [rows, ld]; lengths neutralised.
StatusOr<std::vector<float>> reference_logits(PagedLogitsTopkProblem& p, int64_t* ld) {
  *ld = (int64_t{p.W} * kPageSize + 255) / 256 * 256;
  std::vector<int32_t> schedule(static_cast<size_t>(logits_schedule_words(1)));
  LogitsScheduleParams sp{p.row_len.data(),        p.batch, p.n, 1, p.W, kPageSize, schedule.data(),
                          int32_t(schedule.size())};
  DSA_RETURN_IF_ERROR(build_logits_schedule_ref(sp));
  std::vector<float> logits(size_t(p.rows()) * size_t(*ld));
  PagedLogitsParams l;
  l.q = p.q.data();
  l.w = p.w.data();
  l.row_len = p.row_len.data();
  l.req_slot = p.req_slot.data();
  l.page_table = p.table.table();
  l.pool = p.pool.pool();
  l.schedule = schedule.data();
  l.schedule_words = int32_t(schedule.size());
  l.batch_pad = p.batch;
  l.rows_per_request = p.n;
  l.num_heads = p.heads;
  l.num_consumers = 1;
  l.logits = logits.data();
  l.logits_ld = *ld;
  l.logits_rows = p.rows();
  ScopedCheckedMode unchecked(false);  // neutralised lengths, as the op's selection sees them
  DSA_RETURN_IF_ERROR(paged_logits_ref(l));
  return logits;
}

int32_t effective_len(const PagedLogitsTopkProblem& p, int32_t r) {
  return std::clamp(p.row_len[size_t(r)], 0, p.W * kPageSize);
}
int32_t effective_row(PagedLogitsTopkProblem& p, int32_t r) {
  const int32_t slot = p.req_slot[size_t(r / p.n)];
  return slot < 0 || slot >= p.table.table().num_rows ? 0 : slot;
}
int32_t slot_of(PagedLogitsTopkProblem& p, int32_t row, int32_t s) {
  int32_t page = p.table.at(row, s / kPageSize);
  if (page < 0 || page >= p.pool.pool().num_pages) page = 0;
  return page * kPageSize + s % kPageSize;
}

// Positions [0, len) of a row sorted by (order value descending, position ascending).
std::vector<int32_t> sorted_positions(const float* row, int32_t len) {
  std::vector<int32_t> pos(static_cast<size_t>(len));
  std::iota(pos.begin(), pos.end(), 0);
  std::stable_sort(pos.begin(), pos.end(),
                   [&](int32_t a, int32_t b) { return order_value(row[a]) > order_value(row[b]); });
  return pos;
}

}  // namespace

PagedLogitsTopkProblem::PagedLogitsTopkProblem(testing::Rng& rng, int32_t batch_, int32_t n_,
                                               int32_t heads_, int32_t W_, int32_t k_,
                                               const std::vector<int32_t>& bases, int32_t padded)
    : batch(batch_),
      n(n_),
      heads(heads_),
      W(W_),
      k(k_),
      pool(batch_ * W_ + 1),
      table(batch_ + 1, W_, batch_ * W_ + 1),
      q(rng.e4m3_vector(size_t(batch_) * n_ * heads_ * kIndexHeadDim)),
      w(size_t(batch_) * n_ * heads_),
      row_len(size_t(batch_) * n_, 0),
      req_slot(static_cast<size_t>(batch_), 0),
      idx(size_t(batch_) * n_ * k_, -7) {
  pool.fill_random(rng);
  for (auto& v : w) v = rng.normal(0.f, 0.1f);
  std::vector<int32_t> free_pages = rng.permutation(1, batch * W + 1);
  std::vector<int32_t> rows = rng.permutation(1, batch + 1);
  const int32_t cap = W * kPageSize;
  for (int32_t b = 0; b < batch; ++b) {
    if (padded > 0 && b % padded == padded - 1) continue;
    int32_t base = bases.empty() ? -1 : bases[size_t(b) % bases.size()];
    if (base < 0) base = int32_t(rng.randint(0, cap - n));
    base = std::min(base, cap - n);
    req_slot[size_t(b)] = rows[size_t(b)];
    table.assign(req_slot[size_t(b)], base + n, free_pages);
    for (int32_t j = 0; j < n; ++j) row_len[size_t(b * n + j)] = base + j + 1;
  }
}

PagedLogitsTopkParams PagedLogitsTopkProblem::params() {
  PagedLogitsTopkParams p;
  p.q = q.data();
  p.w = w.data();
  p.row_len = row_len.data();
  p.req_slot = req_slot.data();
  p.page_table = table.table();
  p.pool = pool.pool();
  p.batch_pad = batch;
  p.rows_per_request = n;
  p.num_heads = heads;
  p.k = k;
  p.idx = idx.data();
  return p;
}

StatusOr<std::vector<std::vector<int32_t>>> expected_slots(PagedLogitsTopkProblem& p) {
  int64_t ld = 0;
  DSA_ASSIGN_OR_RETURN(std::vector<float> logits, reference_logits(p, &ld));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(p.rows()));
  for (int32_t r = 0; r < p.rows(); ++r) {
    const int32_t len = effective_len(p, r), row = effective_row(p, r);
    std::vector<int32_t> pos = sorted_positions(logits.data() + int64_t{r} * ld, len);
    pos.resize(std::min<size_t>(pos.size(), size_t(p.k)));
    for (int32_t s : pos) out[size_t(r)].push_back(slot_of(p, row, s));
    std::sort(out[size_t(r)].begin(), out[size_t(r)].end());
  }
  return out;
}

Status compare_selection(const std::vector<int32_t>& got,
                         const std::vector<std::vector<int32_t>>& expected, int32_t k) {
  for (size_t r = 0; r < expected.size(); ++r) {
    const size_t m = expected[r].size();
    std::vector<int32_t> row(got.begin() + int64_t(r) * k, got.begin() + int64_t(r) * k + m);
    for (int32_t i = int32_t(m); i < k; ++i) {
      if (got[r * size_t(k) + size_t(i)] != -1) {
        return internal_error(fmt::format("paged_logits_topk: row {} slot {} = {}, expected -1", r,
                                          i, got[r * size_t(k) + size_t(i)]));
      }
    }
    std::sort(row.begin(), row.end());
    if (row != expected[r]) {
      const auto diff = std::mismatch(row.begin(), row.end(), expected[r].begin());
      return internal_error(fmt::format(
          "paged_logits_topk: row {} selects slot {} where the full sort gives {} ({} slots)", r,
          diff.first == row.end() ? -1 : *diff.first,
          diff.second == expected[r].end() ? -1 : *diff.second, m));
    }
  }
  return ok_status();
}

Status check_paged_logits_topk(PagedLogitsTopkFn op, int32_t batch, int32_t n, int32_t heads,
                               int32_t context_len, uint64_t seed) {
  if (batch < 1 || n < 1 || n > 8 || context_len < n) {
    return invalid_argument(
        fmt::format("check_paged_logits_topk: batch = {}, n = {}, context_len = {}: need batch "
                    ">= 1, 1 <= n <= 8, context_len >= n",
                    batch, n, context_len));
  }
  ScopedCheckedMode checked(true);
  testing::Rng rng(seed);
  const int32_t W = (context_len + kPageSize - 1) / kPageSize, K = 64;
  // Lengths around K and the full context, one padded request in four.
  PagedLogitsTopkProblem p(rng, batch, n, heads, W, K, {context_len - n, K - 1, K, -1}, 4);
  DSA_RETURN_IF_ERROR(op(p.params()));
  int64_t ld = 0;
  DSA_ASSIGN_OR_RETURN(std::vector<float> logits, reference_logits(p, &ld));
  for (int32_t r = 0; r < p.rows(); ++r) {
    const int32_t len = effective_len(p, r), row = effective_row(p, r), m = std::min(len, K);
    const float* v = logits.data() + int64_t{r} * ld;
    std::unordered_map<int32_t, int32_t> position;  // slot -> position
    for (int32_t s = 0; s < len; ++s) position[slot_of(p, row, s)] = s;
    const int32_t* got = p.idx.data() + int64_t{r} * K;
    // The boundary: the K-th best reference value; entries within eps of it may go either way.
    const std::vector<int32_t> sorted = sorted_positions(v, len);
    float peak = 0.f;
    for (int32_t s = 0; s < len; ++s) peak = std::max(peak, std::fabs(v[s]));
    const double eps = std::ldexp(double(peak), -7);
    const double edge = m > 0 ? order_value(v[sorted[size_t(m - 1)]]) : 0.0;
    std::vector<bool> taken(static_cast<size_t>(len), false);
    for (int32_t i = 0; i < K; ++i) {
      if (i >= m) {
        if (got[i] != -1) {
          return internal_error(
              fmt::format("paged_logits_topk: row {} slot {} = {}, want -1", r, i, got[i]));
        }
        continue;
      }
      const auto it = position.find(got[i]);
      if (it == position.end() || taken[size_t(it->second)]) {
        return internal_error(fmt::format(
            "paged_logits_topk: row {} entry {} = {} is not a new slot of the row", r, i, got[i]));
      }
      taken[size_t(it->second)] = true;
      if (order_value(v[it->second]) < edge - eps) {
        return internal_error(fmt::format(
            "paged_logits_topk: row {} selects position {} (logit {}) below the K-th {}", r,
            it->second, v[it->second], edge));
      }
    }
    for (int32_t s = 0; s < len; ++s) {
      if (!taken[size_t(s)] && order_value(v[s]) > edge + eps) {
        return internal_error(
            fmt::format("paged_logits_topk: row {} misses position {} (logit {} above the K-th {})",
                        r, s, v[s], edge));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
