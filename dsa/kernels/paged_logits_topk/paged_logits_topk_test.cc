// CPU tests of the fused selection's reference: its index sets equal the independent selection
// (paged_logits_ref's rows fully sorted under the §3e order, ties to the lower position, mapped
// through the page table); K and the shapes are range-checked; checked mode refuses bad lengths
// before writing, unchecked mode clamps them as paged_logits does; the `dsa check` entry passes.
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

constexpr int32_t kK = 64;

TEST(PagedLogitsTopk, ReferenceEqualsSortedSelectionOfThePagedLogits) {
  Rng rng(testing::test_seed());
  // Lengths 1.., K - 1, K, K + 1, random, W P; the last request padded (length 0).
  PagedLogitsTopkProblem p(rng, 7, 3, 16, 48, kK, {0, kK - 2, kK - 1, kK, 1234, 48 * 64 - 3}, 7);
  ASSERT_TRUE(paged_logits_topk_ref(p.params()).ok());
  auto expected = expected_slots(p);
  ASSERT_TRUE(expected.ok());
  const Status st = compare_selection(p.idx, *expected, kK);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(PagedLogitsTopk, CheckEntryPassesOnTheReference) {
  const Status st =
      check_paged_logits_topk(paged_logits_topk_ref, 3, 3, 16, 700, testing::test_seed() + 7);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// A selection that swaps one winner for a loser of its row (the worst-ranked position) and one
// that leaves a slot unwritten: the check must fail on both.
Status swap_one_winner(const PagedLogitsTopkParams& p) {
  DSA_RETURN_IF_ERROR(paged_logits_topk_ref(p));
  for (int32_t r = 0; r < p.batch_pad * p.rows_per_request; ++r) {
    if (p.row_len[r] > p.k + 10) {  // a row with losers: position len - 1 is one, probably
      const int32_t row = p.req_slot[r / p.rows_per_request], s = p.row_len[r] - 1;
      p.idx[int64_t{r} * p.k] =
          p.page_table.data[int64_t{row} * p.page_table.width + s / 64] * 64 + s % 64;
      return ok_status();
    }
  }
  return ok_status();
}
Status drop_last_slot(const PagedLogitsTopkParams& p) {
  DSA_RETURN_IF_ERROR(paged_logits_topk_ref(p));
  p.idx[int64_t{p.batch_pad} * p.rows_per_request * p.k - 1] = 12345;
  return ok_status();
}

TEST(PagedLogitsTopk, CheckEntryCatchesWrongSelections) {
  EXPECT_EQ(check_paged_logits_topk(swap_one_winner, 3, 3, 16, 700, 11).code(),
            StatusCode::kInternal);
  EXPECT_EQ(check_paged_logits_topk(drop_last_slot, 3, 3, 16, 700, 12).code(),
            StatusCode::kInternal);
}

TEST(PagedLogitsTopk, RangeChecksNameTheField) {
  Rng rng(1);
  PagedLogitsTopkProblem p(rng, 2, 1, 16, 4, kK, {10}, 0);
  for (int32_t k : {0, 32, 65, 4096}) {
    PagedLogitsTopkParams params = p.params();
    params.k = k;
    const Status st = validate(params);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << k;
    EXPECT_NE(st.to_string().find("k = " + std::to_string(k)), std::string::npos) << st.to_string();
  }
  PagedLogitsTopkParams params = p.params();
  params.rows_per_request = 9;
  EXPECT_EQ(validate(params).code(), StatusCode::kInvalidArgument);
  params = p.params();
  params.idx = nullptr;
  EXPECT_NE(validate(params).to_string().find("idx"), std::string::npos);
  params = p.params();
  params.num_heads = 48;
  EXPECT_EQ(validate(params).code(), StatusCode::kInvalidArgument);
}

TEST(PagedLogitsTopk, CheckedModeRefusesBadLengthsUncheckedClamps) {
  Rng rng(testing::test_seed() + 1);
  PagedLogitsTopkProblem p(rng, 3, 2, 16, 8, kK, {100, 8 * 64 - 2, 7}, 0);
  p.row_len[3] = 8 * 64 + 5;  // request 1, row 1: past W P
  {
    ScopedCheckedMode checked(true);
    const Status st = paged_logits_topk_ref(p.params());
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
    EXPECT_TRUE(std::all_of(p.idx.begin(), p.idx.end(), [](int32_t v) { return v == -7; }));
  }
  ScopedCheckedMode unchecked(false);
  ASSERT_TRUE(paged_logits_topk_ref(p.params()).ok());
  const std::vector<int32_t> over = p.idx;
  p.row_len[3] = 8 * 64;
  ASSERT_TRUE(paged_logits_topk_ref(p.params()).ok());
  EXPECT_EQ(over, p.idx);
}

}  // namespace
}  // namespace dsa::kernels
