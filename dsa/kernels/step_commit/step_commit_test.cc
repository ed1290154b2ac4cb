// The step commit's CPU reference against the independent formulation of step_commit_check (every
// target, every accepted count, edge positions, a padded request, the folded token gather), and its
// errors: an accepted count out of range, a position without a page, a bad slot, bad params.
#include "dsa/kernels/step_commit/step_commit.h"

#include <gtest/gtest.h>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/step_commit/step_commit_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

TEST(StepCommit, MatchesTheIndependentFormulation) {
  for (int32_t d : {1, 2, 3, 4, 7}) {
    for (int32_t B : {1, 3, 9, 33}) {
      const Status s = check_step_commit(step_commit_ref, B, d, testing::test_seed() + 13 * d + B);
      EXPECT_TRUE(s.ok()) << "d " << d << " B " << B << ": " << s.message();
    }
  }
}

// The comparison itself fails on a wrong patch: a commit that forgets the accepted count.
TEST(StepCommit, TheComparisonCatchesAWrongPatch) {
  StepCommitCase before =
      random_step_commit_case(StepCommitTarget::kChainDecode, 6, 3, 1, testing::test_seed());
  StepCommitCase got = before;
  for (int32_t& a : got.accepted) a = 0;
  ASSERT_TRUE(step_commit_ref(got.params()).ok());
  got.accepted = before.accepted;
  const Status s = compare_step_commit(before, got);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("step_commit:"), std::string::npos) << s.message();
}

TEST(StepCommit, AnAcceptedCountOutOfRangeIsRefusedAndLeavesTheRequest) {
  for (StepCommitTarget t : {StepCommitTarget::kDraftExtend, StepCommitTarget::kChainDecode}) {
    const int32_t d = 3, n = d + 1;
    StepCommitCase c = random_step_commit_case(t, 4, d, 1, testing::test_seed() + 1);
    // The others as committed with request 2 at a = 0 ...
    StepCommitCase others = c;
    others.accepted[2] = 0;
    ASSERT_TRUE(step_commit_ref(others.params()).ok());
    const StepCommitCase before = c;
    c.accepted[2] = d + 1;
    const Status s = step_commit_ref(c.params());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("accepted[2] = 4"), std::string::npos) << s.message();
    // ... and request 2 exactly as built.
    for (int32_t b = 0; b < 4; ++b) {
      const StepCommitCase& want = b == 2 ? before : others;
      if (t == StepCommitTarget::kDraftExtend) {
        EXPECT_EQ(c.sample_row[size_t(b)], want.sample_row[size_t(b)]) << b;
        for (int32_t j = 0; j < n; ++j) {
          EXPECT_EQ(c.tokens[size_t(b * n + j)], want.tokens[size_t(b * n + j)]) << b << " " << j;
        }
      } else {
        EXPECT_EQ(c.positions[size_t(b)], want.positions[size_t(b)]) << b;
        EXPECT_EQ(c.write_slot[size_t(b)], want.write_slot[size_t(b)]) << b;
        EXPECT_EQ(c.hidden_rows[size_t(b)], want.hidden_rows[size_t(b)]) << b;
      }
    }
  }
}

TEST(StepCommit, AShiftOutOfRangeIsRefused) {
  for (StepCommitTarget t : {StepCommitTarget::kVerify, StepCommitTarget::kDraftExtend,
                             StepCommitTarget::kChainDecode}) {
    StepCommitCase c = random_step_commit_case(t, 3, 2, 1, testing::test_seed() + 5, true);
    c.shift_accepted[1] = 3;
    const StepCommitCase before = c;
    const Status s = step_commit_ref(c.params());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("shift_accepted[1] = 3"), std::string::npos) << s.message();
    EXPECT_EQ(c.positions[t == StepCommitTarget::kChainDecode ? 1 : 3],
              before.positions[t == StepCommitTarget::kChainDecode ? 1 : 3]);
  }
}

// SPEC.md §9 bug class 12: a device position ahead of the host's pages is an error, and nothing is
// written to page 0 (write_slot -1).
TEST(StepCommit, APositionWithoutAPageIsAnErrorAndWritesNothing) {
  StepCommitCase c =
      random_step_commit_case(StepCommitTarget::kChainDecode, 5, 3, 2, testing::test_seed() + 2);
  c.accepted[3] = 3;
  const int32_t pos = c.committed[3] + 3 + 2;
  c.page_table[size_t(c.req_slot[3] * c.width + pos / kPageSize)] = 0;
  Status s = step_commit_ref(c.params());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("request 3: position " + std::to_string(pos) + " has no page"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(c.write_slot[3], -1);
  // Past the table's width.
  StepCommitCase w =
      random_step_commit_case(StepCommitTarget::kChainDecode, 2, 3, 1, testing::test_seed() + 3);
  w.positions[0] = w.width * kPageSize - 1;
  w.accepted[0] = 1;
  s = step_commit_ref(w.params());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_EQ(w.write_slot[0], -1);
  // A slot outside the table.
  StepCommitCase r =
      random_step_commit_case(StepCommitTarget::kChainDecode, 2, 3, 1, testing::test_seed() + 4);
  r.req_slot[1] = r.table_rows;
  s = step_commit_ref(r.params());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("req_slot[1]"), std::string::npos) << s.message();
  EXPECT_EQ(r.write_slot[1], -1);
}

// The folded token gather: the comparison catches a commit that skips it, a request the commit
// refuses still gets its kept tokens (the separate gather ran whatever the commit decided), and
// the gather's fields are checked.
TEST(StepCommit, TheFoldedTokenGather) {
  for (StepCommitTarget t : {StepCommitTarget::kVerify, StepCommitTarget::kDraftExtend,
                             StepCommitTarget::kChainDecode}) {
    const StepCommitCase before =
        random_step_commit_case(t, 9, 3, 1, testing::test_seed() + 5, true, /*gather=*/true);
    StepCommitCase skipped = before;
    StepCommitParams p = skipped.params();
    p.kept_tokens = nullptr, p.draft_tokens = nullptr;
    ASSERT_TRUE(step_commit_ref(p).ok());
    EXPECT_FALSE(compare_step_commit(before, skipped).ok()) << int(t);
    StepCommitCase got = before;
    ASSERT_TRUE(step_commit_ref(got.params()).ok());
    EXPECT_TRUE(compare_step_commit(before, got).ok()) << int(t);
  }
  {
    StepCommitCase c = random_step_commit_case(StepCommitTarget::kChainDecode, 4, 3, 2,
                                               testing::test_seed() + 6, false, true);
    c.accepted[2] = 9;  // refused: the request keeps its rows, but its token is still gathered
    c.draft_tokens[2] = 17;
    EXPECT_EQ(step_commit_ref(c.params()).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.tokens[2], 17);
  }
  {
    // A refused draft extend: its token rows stay unpatched, so the gather fills row a too.
    StepCommitCase before = random_step_commit_case(StepCommitTarget::kDraftExtend, 4, 3, 1,
                                                    testing::test_seed() + 7, false, true);
    before.accepted[1] = 5;
    StepCommitCase got = before;
    EXPECT_EQ(step_commit_ref(got.params()).code(), StatusCode::kInvalidArgument);
    for (int32_t j = 0; j < 4; ++j) {
      const int32_t k = before.token_rows[size_t(4 + j)];
      const int32_t want = k >= 0 && k < int32_t(before.kept_tokens.size())
                               ? before.kept_tokens[size_t(k)]
                               : before.tokens[size_t(4 + j)];
      EXPECT_EQ(got.tokens[size_t(4 + j)], want) << "row " << j;
    }
  }
  StepCommitCase e = random_step_commit_case(StepCommitTarget::kDraftExtend, 2, 3, 1,
                                             testing::test_seed(), false, true);
  StepCommitParams p = e.params();
  p.kept_count = 0;
  EXPECT_NE(step_commit_ref(p).message().find("kept_count = 0"), std::string::npos);
  p = e.params();
  p.token_rows = nullptr;
  EXPECT_NE(step_commit_ref(p).message().find("token_rows is null"), std::string::npos);
  p = e.params();
  p.draft_tokens = p.kept_tokens;
  p.vocab = 5;
  EXPECT_NE(step_commit_ref(p).message().find("draft_tokens"), std::string::npos);
  StepCommitCase c = random_step_commit_case(StepCommitTarget::kChainDecode, 2, 3, 1,
                                             testing::test_seed(), false, true);
  p = c.params();
  p.vocab = 0;
  EXPECT_NE(step_commit_ref(p).message().find("vocab = 0"), std::string::npos);
  p = c.params();
  p.kept_tokens = p.draft_tokens, p.kept_count = 2;
  EXPECT_NE(step_commit_ref(p).message().find("kept_tokens"), std::string::npos);
}

TEST(StepCommit, BadParamsNameTheField) {
  StepCommitCase c =
      random_step_commit_case(StepCommitTarget::kChainDecode, 2, 3, 1, testing::test_seed());
  StepCommitParams p = c.params();
  p.drafts_per_request = 0;
  EXPECT_NE(step_commit_ref(p).message().find("drafts_per_request = 0"), std::string::npos);
  p = c.params();
  p.drafts_per_request = 8;
  EXPECT_EQ(step_commit_ref(p).code(), StatusCode::kInvalidArgument);
  p = c.params();
  p.rows.write_slot = nullptr;
  EXPECT_NE(step_commit_ref(p).message().find("rows.write_slot is null"), std::string::npos);
  p = c.params();
  p.topk = 0;
  EXPECT_NE(step_commit_ref(p).message().find("topk = 0"), std::string::npos);
  p = c.params();
  p.requests = -1;
  EXPECT_NE(step_commit_ref(p).message().find("requests = -1"), std::string::npos);
  StepCommitCase e =
      random_step_commit_case(StepCommitTarget::kDraftExtend, 2, 3, 1, testing::test_seed());
  p = e.params();
  p.sample_row = nullptr;
  EXPECT_NE(step_commit_ref(p).message().find("sample_row is null"), std::string::npos);
  StepCommitCase v =
      random_step_commit_case(StepCommitTarget::kVerify, 2, 3, 1, testing::test_seed(), true);
  p = v.params();
  p.shift_emitted = nullptr;
  EXPECT_NE(step_commit_ref(p).message().find("shift_emitted is null"), std::string::npos);
  // No requests: nothing read, nothing needed.
  EXPECT_TRUE(step_commit_ref(StepCommitParams{.requests = 0, .drafts_per_request = 3}).ok());
}

}  // namespace
}  // namespace dsa::kernels
