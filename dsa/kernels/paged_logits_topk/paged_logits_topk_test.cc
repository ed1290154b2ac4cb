// CPU tests of the fused selection's reference: its index sets equal an independent selection
// (a full sort under the §3e order, ties to the lower position) of paged_logits_ref's rows mapped
// through the page table; K and the shapes are range-checked; checked mode refuses bad lengths
// before writing, unchecked mode clamps them as paged_logits does.
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits/paged_logits_test_case.h"

namespace dsa::kernels {
namespace {

using namespace paged_logits_test;  // NOLINT: the paged-logits fixture (Case)

constexpr int32_t kK = 64;

Case make_case(Rng& rng, int32_t batch, int32_t n, int32_t W, const std::vector<int32_t>& bases) {
  const int32_t num_pages = batch * W + 1;
  Case c(batch, n, 16, W, num_pages, batch + 1);
  c.pool.fill_random(rng);
  c.randomize_qw(rng);
  std::vector<int32_t> free_pages = rng.permutation(1, num_pages);
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t base = bases[size_t(b) % bases.size()];
    if (base < 0) continue;  // padded
    c.req_slot[size_t(b)] = b + 1;
    c.table.assign(b + 1, std::max(base + n, 1), free_pages);
    for (int32_t j = 0; j < n; ++j) c.row_len[size_t(b * n + j)] = base + j + 1;
  }
  return c;
}

PagedLogitsTopkParams fused_params(Case& c, std::vector<int32_t>& idx) {
  const PagedLogitsParams l = c.params();
  PagedLogitsTopkParams p;
  p.q = l.q, p.w = l.w, p.row_len = l.row_len, p.req_slot = l.req_slot;
  p.page_table = l.page_table;
  p.pool = l.pool;
  p.batch_pad = c.batch_pad;
  p.rows_per_request = c.n;
  p.num_heads = c.heads;
  p.k = kK;
  idx.assign(size_t(c.batch_pad) * c.n * kK, -7);
  p.idx = idx.data();
  return p;
}

// The §3e order on a value: NaN lowest, -0 == +0.
double order_value(float v) { return std::isnan(v) ? -INFINITY * 2.0 : double(v) + 0.0; }

// The independent selection: every position sorted by (value desc, position asc), the first K.
std::vector<int32_t> brute_force_slots(Case& c, int64_t r, int32_t len) {
  std::vector<int32_t> pos(static_cast<size_t>(len));
  std::iota(pos.begin(), pos.end(), 0);
  std::stable_sort(pos.begin(), pos.end(), [&](int32_t a, int32_t b) {
    const float va = c.at(r, a), vb = c.at(r, b);
    if (std::isnan(va) || std::isnan(vb)) return !std::isnan(va) && std::isnan(vb);
    return order_value(va) > order_value(vb);
  });
  pos.resize(std::min<size_t>(pos.size(), kK));
  const int32_t row = c.req_slot[size_t(r / c.n)];
  std::vector<int32_t> slots;
  for (int32_t s : pos) slots.push_back(c.table.at(row, s / 64) * 64 + s % 64);
  std::sort(slots.begin(), slots.end());
  return slots;
}

TEST(PagedLogitsTopk, ReferenceEqualsSortedSelectionOfThePagedLogits) {
  Rng rng(testing::test_seed());
  // Lengths 0 (padded), 1, K - 1, K, K + 1, random, W P.
  Case c = make_case(rng, 7, 3, 48, {-1, 0, kK - 2, kK - 1, kK, 1234, 48 * 64 - 3});
  std::vector<int32_t> idx;
  ASSERT_TRUE(paged_logits_topk_ref(fused_params(c, idx)).ok());
  ASSERT_TRUE(paged_logits_ref(c.params()).ok());  // c.logits: the rows the selection saw
  for (int64_t r = 0; r < int64_t{c.batch_pad} * c.n; ++r) {
    const int32_t len = c.row_len[size_t(r)], m = std::min(len, kK);
    std::vector<int32_t> got(idx.begin() + r * kK, idx.begin() + r * kK + m);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, brute_force_slots(c, r, len)) << "row " << r;
    for (int32_t i = m; i < kK; ++i) EXPECT_EQ(idx[size_t(r * kK + i)], -1) << "row " << r;
  }
}

TEST(PagedLogitsTopk, RangeChecksNameTheField) {
  Rng rng(1);
  Case c = make_case(rng, 2, 1, 4, {10});
  std::vector<int32_t> idx;
  for (int32_t k : {0, 32, 65, 4096}) {
    PagedLogitsTopkParams p = fused_params(c, idx);
    p.k = k;
    const Status st = validate(p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << k;
    EXPECT_NE(st.to_string().find("k = " + std::to_string(k)), std::string::npos) << st.to_string();
  }
  PagedLogitsTopkParams p = fused_params(c, idx);
  p.rows_per_request = 9;
  EXPECT_EQ(validate(p).code(), StatusCode::kInvalidArgument);
  p = fused_params(c, idx);
  p.idx = nullptr;
  EXPECT_NE(validate(p).to_string().find("idx"), std::string::npos);
  p = fused_params(c, idx);
  p.num_heads = 48;
  EXPECT_EQ(validate(p).code(), StatusCode::kInvalidArgument);
}

TEST(PagedLogitsTopk, CheckedModeRefusesBadLengthsUncheckedClamps) {
  Rng rng(testing::test_seed() + 1);
  Case c = make_case(rng, 3, 2, 8, {100, 8 * 64 - 2, 7});
  c.row_len[3] = 8 * 64 + 5;  // request 1, row 1: past W P
  std::vector<int32_t> idx;
  {
    ScopedCheckedMode checked(true);
    const Status st = paged_logits_topk_ref(fused_params(c, idx));
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
    EXPECT_TRUE(std::all_of(idx.begin(), idx.end(), [](int32_t v) { return v == -7; }));
  }
  ScopedCheckedMode unchecked(false);
  ASSERT_TRUE(paged_logits_topk_ref(fused_params(c, idx)).ok());
  std::vector<int32_t> clamped_idx;
  Case clamped = c;
  clamped.row_len[3] = 8 * 64;
  clamped.schedule.clear();
  ASSERT_TRUE(paged_logits_topk_ref(fused_params(clamped, clamped_idx)).ok());
  EXPECT_EQ(idx, clamped_idx);
}

}  // namespace
}  // namespace dsa::kernels
