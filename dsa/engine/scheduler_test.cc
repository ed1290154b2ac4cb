// The scheduler over a bare page pool (no model): FIFO admission under the slot and page limits,
// a request that can never fit refused, finishing frees the pages for the next in line.
#include "dsa/engine/scheduler.h"

#include <gtest/gtest.h>

#include <climits>

namespace dsa::engine {
namespace {

GenerationRequest request_of(int32_t prompt_len, int32_t max_new) {
  GenerationRequest r;
  r.prompt.assign(size_t(prompt_len), 1);
  r.max_new_tokens = max_new;
  return r;
}

// 9 pages (8 usable), 4 request rows (3 usable), width 8: a request of 100 + 20 tokens with d = 1
// needs 100 + 20 + 2 * 2 = 124 positions = 2 pages.
TEST(Scheduler, AdmitsFifoWithinSlotsAndPagesAndFreesOnFinish) {
  runtime::PagedCacheManager pages(9, 4, 8);
  Scheduler s(pages, {.max_running = 2, .max_context = 512, .rows_per_request = 2});
  RequestState& a = s.add(request_of(100, 20));
  RequestState& b = s.add(request_of(300, 60));  // 364 positions: 6 pages
  RequestState& c = s.add(request_of(10, 5));
  EXPECT_EQ(a.id, 0);
  EXPECT_EQ(c.id, 2);
  ASSERT_TRUE(s.admit().ok());
  ASSERT_EQ(s.running().size(), 2u);  // max_running
  EXPECT_EQ(a.phase, RequestPhase::kPrefill);
  EXPECT_EQ(b.phase, RequestPhase::kPrefill);
  EXPECT_EQ(c.phase, RequestPhase::kWaiting);
  EXPECT_EQ(pages.num_free_pages(), 0);
  EXPECT_EQ(pages.pages_held(a.req_slot), 2);

  ASSERT_TRUE(s.admit().ok());  // nothing fits: still waiting, no error
  EXPECT_EQ(c.phase, RequestPhase::kWaiting);

  a.finish = FinishReason::kEos;
  auto done = s.retire_finished();
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ((*done)[0], &a);
  EXPECT_EQ(a.phase, RequestPhase::kFinished);
  EXPECT_EQ(pages.num_free_pages(), 2);
  ASSERT_TRUE(s.admit().ok());
  EXPECT_EQ(c.phase, RequestPhase::kPrefill);
  EXPECT_TRUE(s.has_work());
  b.finish = c.finish = FinishReason::kMaxNewTokens;
  ASSERT_TRUE(s.retire_finished().ok());
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(pages.num_free_pages(), 8);
  EXPECT_EQ(&s.request(1), &b);  // finished requests stay readable
}

// A request that can never fit fails alone; the one behind it runs.
TEST(Scheduler, ARequestThatCanNeverFitFailsAlone) {
  runtime::PagedCacheManager pages(3, 4, 8);  // 2 usable pages = 128 positions
  Scheduler s(pages, {.max_running = 2, .max_context = 512, .rows_per_request = 1});
  RequestState& big = s.add(request_of(200, 10));
  RequestState& small = s.add(request_of(20, 10));
  ASSERT_TRUE(s.admit().ok());
  EXPECT_EQ(big.finish, FinishReason::kError);
  EXPECT_EQ(big.error.code(), StatusCode::kResourceExhausted) << big.error.to_string();
  EXPECT_NE(big.error.message().find("needs 4 pages"), std::string::npos) << big.error.to_string();
  EXPECT_NE(big.error.message().find("the page pool has 2"), std::string::npos);
  EXPECT_EQ(small.phase, RequestPhase::kPrefill);
  auto done = s.retire_finished();
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ((*done)[0], &big);
  EXPECT_TRUE(s.release(big.id).ok());
  EXPECT_EQ(s.release(big.id).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.release(small.id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.num_requests(), 1u);
}

// The context bounds the life of a request: max_new_tokens beyond it reserves only up to it.
TEST(Scheduler, ReservationIsCappedByTheContext) {
  runtime::PagedCacheManager pages(9, 4, 8);
  Scheduler s(pages, {.max_running = 1, .max_context = 128, .rows_per_request = 1});
  RequestState& r = s.add(request_of(50, 1000));
  ASSERT_TRUE(s.admit().ok());
  EXPECT_EQ(pages.pages_held(r.req_slot), 3);  // min(1050, 128) + 2 = 130 positions
  r.finish = FinishReason::kEos;
  ASSERT_TRUE(s.retire_finished().ok());
  RequestState& huge = s.add(request_of(50, INT32_MAX));  // the sum overflows int32
  ASSERT_TRUE(s.admit().ok());
  EXPECT_EQ(huge.phase, RequestPhase::kPrefill);
  EXPECT_EQ(pages.pages_held(huge.req_slot), 3);
}

// Abort finishes a running request (its pages freed at once) or a waiting one (it leaves the
// queue), and refuses unknown, finished and refused requests.
TEST(Scheduler, AbortFreesPagesAndLeavesTheOthers) {
  runtime::PagedCacheManager pages(9, 4, 8);
  Scheduler s(pages, {.max_running = 1, .max_context = 512, .rows_per_request = 2});
  RequestState& a = s.add(request_of(100, 20));  // 2 pages
  RequestState& b = s.add(request_of(10, 5));
  RequestState& c = s.add(request_of(10, 5));
  ASSERT_TRUE(s.admit().ok());
  EXPECT_EQ(pages.num_free_pages(), 6);
  EXPECT_EQ(b.phase, RequestPhase::kWaiting);

  auto aborted = s.abort(b.id);  // waiting: leaves the queue, no pages were held
  ASSERT_TRUE(aborted.ok());
  EXPECT_EQ(*aborted, &b);
  EXPECT_EQ(b.finish, FinishReason::kAborted);
  EXPECT_EQ(b.phase, RequestPhase::kFinished);
  EXPECT_EQ(pages.num_free_pages(), 6);

  ASSERT_TRUE(s.abort(a.id).ok());  // running: its row is closed now
  EXPECT_EQ(a.finish, FinishReason::kAborted);
  EXPECT_EQ(pages.num_free_pages(), 8);
  EXPECT_TRUE(s.running().empty());
  auto retired = s.retire_finished();  // aborted requests were finished by abort itself
  ASSERT_TRUE(retired.ok());
  EXPECT_TRUE(retired->empty());

  EXPECT_EQ(s.abort(a.id).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.abort(999).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(s.admit().ok());  // c, behind both, runs
  EXPECT_EQ(c.phase, RequestPhase::kPrefill);
  EXPECT_TRUE(s.release(a.id).ok());
  EXPECT_TRUE(s.release(b.id).ok());

  runtime::PagedCacheManager tiny(3, 4, 8);
  Scheduler t(tiny, {.max_running = 2, .max_context = 512, .rows_per_request = 1});
  RequestState& big = t.add(request_of(200, 10));
  ASSERT_TRUE(t.admit().ok());  // refused: it finishes with its own error, not aborted
  EXPECT_EQ(t.abort(big.id).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(big.finish, FinishReason::kError);
}

}  // namespace
}  // namespace dsa::engine
