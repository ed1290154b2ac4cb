// GPU test of step_commit_cuda against the CPU reference: the same bytes in every buffer on fresh
// random cases (every target, d 1..7, every accepted count, edge positions, a padded request, with
// and without the folded token gather), and
// the errors through the device error word: a position without a page (write_slot -1, nothing
// written to page 0) and an accepted count out of range.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/step_commit/step_commit.h"
#include "dsa/kernels/step_commit/step_commit_check.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::dev;
using testing::host;

// Runs step_commit_cuda on device copies of `c`'s buffers and copies every buffer back into `c`.
Status run_on_device(StepCommitCase& c) {
  std::vector<std::vector<int32_t>*> all = {
      &c.accepted,    &c.emitted,        &c.tokens,        &c.token_rows,
      &c.sample_row,  &c.row_len,        &c.row_topk_len,  &c.row_req,
      &c.row_page,    &c.positions,      &c.write_slot,    &c.ks,
      &c.ke,          &c.req_kv_len,     &c.req_slot,      &c.hidden_rows,
      &c.page_table,  &c.shift_accepted, &c.shift_emitted, &c.kept_tokens,
      &c.draft_tokens};
  std::vector<cuda::DeviceBuffer<int32_t>> d;
  // dev(v, 1): an empty vector still gets a (one-element) buffer; the optional fields below pass
  // null for an empty vector instead of that buffer.
  for (std::vector<int32_t>* v : all) d.push_back(dev(*v, 1));
  StepCommitParams p = c.params();  // host pointers, replaced one for one
  const auto on = [&](const std::vector<int32_t>& v) {
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] == &v) return d[i].data();
    }
    return static_cast<int32_t*>(nullptr);
  };
  p.accepted = on(c.accepted), p.emitted = on(c.emitted), p.tokens = on(c.tokens);
  p.token_rows = c.token_rows.empty() ? nullptr : on(c.token_rows);
  p.sample_row = on(c.sample_row);
  p.rows = {on(c.row_len),   on(c.row_topk_len), on(c.row_req), on(c.row_page),
            on(c.positions), on(c.write_slot),   on(c.ks),      on(c.ke)};
  p.req_kv_len = on(c.req_kv_len), p.req_slot = on(c.req_slot);
  p.hidden_rows = c.hidden_rows.empty() ? nullptr : on(c.hidden_rows);
  p.page_table.data = on(c.page_table);
  p.shift_accepted = c.shift_accepted.empty() ? nullptr : on(c.shift_accepted);
  p.shift_emitted = c.shift_emitted.empty() ? nullptr : on(c.shift_emitted);
  p.kept_tokens = c.kept_tokens.empty() ? nullptr : on(c.kept_tokens);
  p.draft_tokens = c.draft_tokens.empty() ? nullptr : on(c.draft_tokens);
  const Status s = step_commit_cuda(p);
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<int32_t> back = host(d[i]);
    back.resize(all[i]->size());
    *all[i] = back;
  }
  return s;
}

TEST(StepCommitCuda, SameBytesAsTheReference) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  uint64_t k = 0;
  for (int32_t d : {1, 3, 4, 7}) {
    for (int32_t B : {1, 5, 130, 300}) {  // 130 and 300: more than one CTA
      // s = -1: the verify, 0: the draft extend, then the chain.
      for (int32_t s = -1; s < 2 * std::max(d, 2); ++s) {
        const int32_t step = s % std::max(d, 2);
        const bool shifted = s >= std::max(d, 2);
        const StepCommitTarget t = s == -1     ? StepCommitTarget::kVerify
                                   : step == 0 ? StepCommitTarget::kDraftExtend
                                               : StepCommitTarget::kChainDecode;
        // With and without the folded token gather.
        for (bool gather : {false, true}) {
          const StepCommitCase before = random_step_commit_case(
              t, B, d, std::max(step, 1), testing::test_seed() + ++k, shifted, gather);
          StepCommitCase ref = before, gpu = before;
          ASSERT_TRUE(step_commit_ref(ref.params()).ok());
          const Status st = run_on_device(gpu);
          ASSERT_TRUE(st.ok()) << st.message();
          const Status same = compare_step_commit(before, gpu);
          EXPECT_TRUE(same.ok()) << "d " << d << " B " << B << " s " << s << " gather " << gather
                                 << ": " << same.message();
          EXPECT_EQ(gpu.tokens, ref.tokens);
          EXPECT_EQ(gpu.write_slot, ref.write_slot);
          EXPECT_EQ(gpu.hidden_rows, ref.hidden_rows);
        }
      }
    }
  }
}

TEST(StepCommitCuda, ErrorsReachTheDeviceErrorWord) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  StepCommitCase c =
      random_step_commit_case(StepCommitTarget::kChainDecode, 5, 3, 2, testing::test_seed() + 9);
  c.accepted[3] = 3;
  const int32_t pos = c.committed[3] + 3 + 2;
  c.page_table[size_t(c.req_slot[3] * c.width + pos / kPageSize)] = 0;
  StepCommitCase ref = c;
  const Status want = step_commit_ref(ref.params());
  Status s = run_on_device(c);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_NE(s.message().find("step_commit"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("index 3 (value " + std::to_string(pos) + ")"), std::string::npos)
      << s.message();
  EXPECT_EQ(want.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.write_slot, ref.write_slot);
  EXPECT_EQ(c.write_slot[3], -1);

  StepCommitCase e =
      random_step_commit_case(StepCommitTarget::kDraftExtend, 4, 3, 1, testing::test_seed() + 10);
  e.accepted[1] = -1;
  s = run_on_device(e);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  // The word was taken: the next launch starts clean.
  StepCommitCase ok =
      random_step_commit_case(StepCommitTarget::kDraftExtend, 4, 3, 1, testing::test_seed() + 11);
  EXPECT_TRUE(run_on_device(ok).ok());
}

}  // namespace
}  // namespace dsa::kernels
