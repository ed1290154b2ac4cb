// GPU tests of paged_logits_topk_cuda: on fresh random decode problems (scattered pages, padded
// requests, lengths 0, 1, K - 1, K, K + 1 and W P) the fused kernel's index sets equal those of
// the unfused CUDA pair (paged_logits_cuda, then topk_cuda kPaged over the same lengths and table
// rows) exactly, since both compute bit-identical logits; every cluster size and a multi-batch
// selection are dispatched; a tie flood takes the lowest positions; checked mode reports bad
// lengths and page ids; a shape that does not fit is refused; graph replay equals eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk_check.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk_launch.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::Rng;

constexpr int32_t kK = 2048;

// The device copy of a problem, with what the unfused pair needs: a §3c schedule (64 consumers),
// logits rows, the neutralised lengths and page-table rows of every row for topk.
struct DeviceProblem {
  DeviceBuffer<uint8_t> q, pool;
  DeviceBuffer<float> w, logits;
  DeviceBuffer<int32_t> row_len, req_slot, table, schedule, len, row_page, idx;
  PagedLogitsParams lp;
  PagedLogitsTopkParams fp;
  int32_t rows;

  explicit DeviceProblem(PagedLogitsTopkProblem& c) : rows(c.rows()) {
    constexpr int32_t G = 64;
    const PageTable t = c.table.table();
    const int64_t ld = (int64_t{c.W} * kPageSize + 255) / 256 * 256;
    std::vector<int32_t> sched(static_cast<size_t>(logits_schedule_words(G)));
    LogitsScheduleParams sp{c.row_len.data(),     c.batch, c.n, G, c.W, kPageSize, sched.data(),
                            int32_t(sched.size())};
    EXPECT_TRUE(build_logits_schedule_ref(sp).ok());
    q = dev(c.q, 1);
    pool = dev(c.pool.bytes(), 1);
    w = dev(c.w, 1);
    logits = dev(std::vector<float>(size_t(rows) * size_t(ld)), 1);
    row_len = dev(c.row_len, 1);
    req_slot = dev(c.req_slot, 1);
    table = dev(std::vector<int32_t>(t.data, t.data + int64_t{t.num_rows} * t.width), 1);
    schedule = dev(sched, 1);
    std::vector<int32_t> eff_len(static_cast<size_t>(rows)), eff_row(static_cast<size_t>(rows));
    for (int32_t r = 0; r < rows; ++r) {
      eff_len[size_t(r)] = std::clamp(c.row_len[size_t(r)], 0, c.W * kPageSize);
      const int32_t slot = c.req_slot[size_t(r / c.n)];
      eff_row[size_t(r)] = slot < 0 || slot >= t.num_rows ? 0 : slot;
    }
    len = dev(eff_len, 1);
    row_page = dev(eff_row, 1);
    idx = dev(std::vector<int32_t>(size_t(rows) * kK, -7), 1);
    fp = c.params();
    fp.q = q.data(), fp.w = w.data(), fp.row_len = row_len.data(), fp.req_slot = req_slot.data();
    fp.page_table.data = table.data();
    fp.pool.data = pool.data();
    fp.idx = idx.data();
    lp.q = fp.q, lp.w = fp.w, lp.row_len = fp.row_len, lp.req_slot = fp.req_slot;
    lp.page_table = fp.page_table;
    lp.pool = fp.pool;
    lp.schedule = schedule.data();
    lp.schedule_words = int32_t(sched.size());
    lp.batch_pad = c.batch;
    lp.rows_per_request = c.n;
    lp.num_heads = c.heads;
    lp.num_consumers = G;
    lp.logits = logits.data();
    lp.logits_ld = ld;
    lp.logits_rows = rows;
  }
  void reset_idx() {
    const std::vector<int32_t> fill(size_t(rows) * kK, -7);
    ASSERT_TRUE(idx.upload(std::span<const int32_t>(fill)).ok());
  }
  Status run_fused(std::vector<int32_t>* out) {
    reset_idx();
    DSA_RETURN_IF_ERROR(paged_logits_topk_cuda(fp));
    DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cuda::current_stream()));
    *out = testing::host(idx);
    return ok_status();
  }
  Status run_pair(std::vector<int32_t>* out) {
    reset_idx();
    DSA_RETURN_IF_ERROR(paged_logits_cuda(lp));
    TopkParams t;
    t.logits = logits.data();
    t.logits_ld = static_cast<int32_t>(lp.logits_ld);
    t.rows = rows;
    t.len = len.data();
    t.k = kK;
    t.variant = TopkVariant::kPaged;
    t.page_table = lp.page_table;
    t.row_page = row_page.data();
    t.out_rows = rows;
    t.idx = idx.data();
    DSA_RETURN_IF_ERROR(topk_cuda(t));
    DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cuda::current_stream()));
    *out = testing::host(idx);
    return ok_status();
  }
};

// Same set in every row (the order inside a row is the kernel's), -1 exactly past min(K, len).
void expect_same_sets(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                      const PagedLogitsTopkProblem& c) {
  for (int32_t r = 0; r < c.rows(); ++r) {
    const int32_t m = std::min(kK, std::clamp(c.row_len[size_t(r)], 0, c.W * kPageSize));
    std::vector<int32_t> a(got.begin() + int64_t{r} * kK, got.begin() + int64_t{r + 1} * kK);
    std::vector<int32_t> b(want.begin() + int64_t{r} * kK, want.begin() + int64_t{r + 1} * kK);
    for (int32_t i = m; i < kK; ++i) ASSERT_EQ(a[size_t(i)], -1) << "row " << r << " slot " << i;
    std::sort(a.begin(), a.begin() + m);
    std::sort(b.begin(), b.begin() + m);
    ASSERT_TRUE(std::equal(a.begin(), a.begin() + m, b.begin())) << "row " << r << " len " << m;
    ASSERT_EQ(std::adjacent_find(a.begin(), a.begin() + m), a.begin() + m) << "dup in row " << r;
  }
}

struct Shape {
  int32_t batch, n, heads, W;
  std::vector<int32_t> bases;  // -1 = random
  int32_t padded;
};

// Shapes chosen so that clusters of 1, 2, 4 and 8 CTAs and a selection in several row batches
// are all dispatched (asserted from the launch plan).
TEST(PagedLogitsTopkCuda, EqualsUnfusedPairOnEveryDispatchedPath) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const std::vector<Shape> shapes = {
      {32, 1, 64, 128, {-1, 0, 1, kK - 2, kK - 1, kK, 128 * 64}, 5},  // 8K keys
      {3, 4, 64, 1024, {-1, kK, 65536 - 4}, 0},                       // 64K keys, n = 4
      {140, 2, 32, 512, {-1, kK + 1}, 7},                             // 32K keys, B > SMs
      {200, 1, 16, 64, {-1, 0, kK - 1, kK}, 3},                       // 4K keys
      {3, 8, 64, 256, {-1, 16384 - 8}, 0},                            // n = 8, 16K keys
      {5, 3, 64, 320, {-1, 5}, 0},                                    // n = 3, 20K keys
      {2, 2, 64, 1024, {-1, 65536 - 2}, 0},                           // n = 2, 64K keys
      {0, 1, 64, 1024, {-1}, 0},   // 64K keys, B = one more than 8-CTA clusters fit: 4 CTAs
      {140, 1, 64, 690, {-1}, 0},  // 44K keys: 1 CTA would have 2 ring stages (< 3 consumers)
      {3, 8, 64, 480, {-1}, 0},    // n = 8, 30K keys: 8 CTAs at the fewest stages the ring takes
  };
  std::set<int32_t> clusters;
  bool batched = false;
  for (Shape s : shapes) {
    auto cap = paged_logits_topk_capacity(s.n, s.heads, s.W);
    ASSERT_TRUE(cap.ok());
    if (s.batch == 0) s.batch = (*cap)[3] + 1;
    const PagedLogitsTopkLaunch l = paged_logits_topk_launch(s.n, s.heads, s.W, s.batch, *cap);
    if (!l.fits) {  // refused, not run: the shape needs more shared memory than 8 CTAs hold
      EXPECT_FALSE(paged_logits_topk_fits(s.n, s.heads, s.W));
      continue;
    }
    EXPECT_GE(l.stages, 3) << "a ring shallower than the consumers hangs";
    clusters.insert(l.cluster);
    batched |= l.rows_per_pass < s.n;
    PagedLogitsTopkProblem c(rng, s.batch, s.n, s.heads, s.W, kK, s.bases, s.padded);
    DeviceProblem d(c);
    std::vector<int32_t> fused, pair;
    Status st = d.run_fused(&fused);
    ASSERT_TRUE(st.ok()) << st.to_string();
    st = d.run_pair(&pair);
    ASSERT_TRUE(st.ok()) << st.to_string();
    SCOPED_TRACE("B " + std::to_string(s.batch) + " n " + std::to_string(s.n) + " cluster " +
                 std::to_string(l.cluster));
    expect_same_sets(fused, pair, c);
  }
  EXPECT_EQ(clusters, (std::set<int32_t>{1, 2, 4, 8}));
  EXPECT_TRUE(batched) << "no shape selected its rows in several batches";
}

// Every logit equal (q = 0): each row takes its lowest min(K, len) positions (§3e ties), so the
// slots are known without any logit arithmetic.
TEST(PagedLogitsTopkCuda, TieFloodTakesLowestPositions) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 1);
  PagedLogitsTopkProblem c(rng, 6, 2, 64, 256, kK, {-1, 9000, kK + 3}, 0);
  std::fill(c.q.begin(), c.q.end(), 0);
  DeviceProblem d(c);
  std::vector<int32_t> got;
  ASSERT_TRUE(d.run_fused(&got).ok());
  for (int32_t r = 0; r < c.rows(); ++r) {
    const int32_t len = c.row_len[size_t(r)], m = std::min(kK, len),
                  row = c.req_slot[size_t(r / c.n)];
    std::vector<int32_t> want;
    for (int32_t s = 0; s < m; ++s) want.push_back(c.table.at(row, s / 64) * 64 + s % 64);
    std::vector<int32_t> a(got.begin() + int64_t{r} * kK, got.begin() + int64_t{r} * kK + m);
    std::sort(a.begin(), a.end());
    std::sort(want.begin(), want.end());
    ASSERT_EQ(a, want) << "row " << r;
    for (int32_t i = m; i < kK; ++i) ASSERT_EQ(got[size_t(r) * kK + i], -1);
  }
}

// Checked mode: a length past W P or a page id outside [1, num_pages) is OutOfRange.
TEST(PagedLogitsTopkCuda, CheckedModeReportsBadLengthsAndPages) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed() + 2);
  {
    PagedLogitsTopkProblem c(rng, 4, 2, 64, 64, kK, {-1}, 0);
    c.row_len[3] = 64 * 64 + 1;
    DeviceProblem d(c);
    std::vector<int32_t> got;
    EXPECT_EQ(d.run_fused(&got).code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(cuda::take_device_error("test").ok());
  }
  {
    PagedLogitsTopkProblem c(rng, 4, 1, 64, 64, kK, {3000}, 0);
    c.table.at(c.req_slot[2], 10) = 100000;
    DeviceProblem d(c);
    std::vector<int32_t> got;
    EXPECT_EQ(d.run_fused(&got).code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(cuda::take_device_error("test").ok());
  }
}

TEST(PagedLogitsTopkCuda, ShapesThatDoNotFitAreRefused) {
  DSA_SKIP_WITHOUT_GPU();
  EXPECT_FALSE(paged_logits_topk_fits(8, 64, 4096));
  Rng rng(5);
  PagedLogitsTopkProblem c(rng, 1, 8, 64, 4096, kK, {100}, 0);
  DeviceProblem d(c);
  std::vector<int32_t> got;
  EXPECT_EQ(d.run_fused(&got).code(), StatusCode::kResourceExhausted);
}

// A captured launch replays to the eager result (no host work inside the op).
TEST(PagedLogitsTopkCuda, GraphReplayEqualsEager) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed() + 3);
  PagedLogitsTopkProblem c(rng, 8, 2, 64, 128, kK, {-1}, 4);
  DeviceProblem d(c);
  cudaStream_t stream = nullptr;  // the legacy default stream cannot capture
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cuda::set_current_stream(stream);
  std::vector<int32_t> eager;
  ASSERT_TRUE(d.run_fused(&eager).ok());
  d.reset_idx();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status st = paged_logits_topk_cuda(d.fp);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(testing::host(d.idx), eager);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda::set_current_stream(nullptr);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dsa::kernels
