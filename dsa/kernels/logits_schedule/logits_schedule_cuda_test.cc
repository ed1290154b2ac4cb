// GPU tests of build_logits_schedule_cuda (SPEC.md §3c, class E): every word bit-identical to
// build_logits_schedule_ref for every input, the words past 10 + 2(G + 1) untouched, and the
// build replayable from a CUDA graph with new lengths each time.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/logits_schedule/logits_schedule_check.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::host;
using testing::Rng;

constexpr int32_t kPoison = -5;
constexpr int32_t kSlack = 7;  // extra words after the schedule that must stay poisoned

struct Shape {
  int32_t batch_pad, n, G, W;
};

std::string describe(const Shape& s) {
  return "B_pad " + std::to_string(s.batch_pad) + ", n " + std::to_string(s.n) + ", G " +
         std::to_string(s.G) + ", W " + std::to_string(s.W);
}

LogitsScheduleParams params(const Shape& s, const int32_t* row_len, int32_t* schedule,
                            int32_t capacity) {
  LogitsScheduleParams p;
  p.row_len = row_len;
  p.batch_pad = s.batch_pad;
  p.rows_per_request = s.n;
  p.num_consumers = s.G;
  p.page_table_width = s.W;
  p.schedule = schedule;
  p.schedule_capacity = capacity;
  return p;
}

std::vector<int32_t> build_ref(const Shape& s, const std::vector<int32_t>& row_len) {
  const int32_t capacity = logits_schedule_words(s.G) + kSlack;
  std::vector<int32_t> out(size_t(capacity), kPoison);
  Status st = build_logits_schedule_ref(params(s, row_len.data(), out.data(), capacity));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

std::vector<int32_t> build_gpu(const Shape& s, const std::vector<int32_t>& row_len) {
  const int32_t capacity = logits_schedule_words(s.G) + kSlack;
  DeviceBuffer<int32_t> d_len = dev(row_len, 1);
  DeviceBuffer<int32_t> d_out = dev(std::vector<int32_t>(size_t(capacity), kPoison), 1);
  Status st = build_logits_schedule_cuda(params(s, d_len.data(), d_out.data(), capacity));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return host(d_out);
}

std::string first_diff(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  return testing::first_difference(got, want, [&](size_t w) {
    return "word " + std::to_string(w) + ": got " + std::to_string(got[w]) + ", want " +
           std::to_string(want[w]);
  });
}

void expect_matches_ref(const Shape& s, const std::vector<int32_t>& row_len) {
  std::vector<int32_t> want = build_ref(s, row_len);
  std::vector<int32_t> got = build_gpu(s, row_len);
  EXPECT_EQ(first_diff(got, want), "") << describe(s);
  Status v = validate_logits_schedule(got.data(), logits_schedule_words(s.G), row_len.data(),
                                      s.batch_pad, s.n, s.G, s.W);
  EXPECT_TRUE(v.ok()) << describe(s) << ": " << v.to_string();
}

// Lengths of every kind: negative (count as 0, hashed raw), zero, short, multiples of S_tok,
// near and above W P, INT32_MAX / INT32_MIN; some requests padded entirely.
std::vector<int32_t> random_row_len(Rng& rng, const Shape& s) {
  std::vector<int32_t> row_len(size_t(s.batch_pad) * s.n);
  const int64_t cap = int64_t{s.W} * kPageSize;
  for (int32_t b = 0; b < s.batch_pad; ++b) {
    const bool padded = rng.randint(0, 4) == 0;
    for (int32_t j = 0; j < s.n; ++j) {
      int32_t& v = row_len[size_t(b) * s.n + j];
      if (padded) {
        v = 0;
        continue;
      }
      switch (rng.randint(0, 9)) {
        case 0:
          v = -int32_t(rng.randint(1, 1000));
          break;
        case 1:
          v = 0;
          break;
        case 2:
          v = int32_t(rng.randint(1, 300));
          break;
        case 3:
          v = int32_t(std::min<int64_t>(rng.randint(1, 8) * kScheduleSplitTokens, INT32_MAX));
          break;
        case 4:
          v = int32_t(std::min<int64_t>(cap + rng.randint(-3, 3), INT32_MAX));
          break;
        case 5:
          v = rng.randint(0, 1) ? INT32_MAX : INT32_MIN;
          break;
        default:
          v = int32_t(rng.randint(0, std::min<int64_t>(cap + cap / 2, INT32_MAX)));
          break;
      }
    }
  }
  return row_len;
}

// Random shapes up to B_pad 256, n 8; G from 1 to 400 (132 and 66 included).
TEST(LogitsScheduleCuda, RandomInputsBitIdentical) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const int32_t consumers[] = {1, 2, 7, 66, 132, 133, 255, 256, 257, 400};
  for (int iter = 0; iter < 400; ++iter) {
    Shape s;
    s.batch_pad = int32_t(rng.randint(0, 256));
    s.n = int32_t(rng.randint(1, 8));
    s.G = iter % 3 == 0 ? int32_t(rng.randint(1, 400)) : consumers[iter % 10];
    s.W = int32_t(rng.randint(1, 3000));
    expect_matches_ref(s, random_row_len(rng, s));
    if (HasFailure()) return;
  }
}

// V3.2 serving shapes: G = 132 (one CTA per SM) and 66 (2-CTA clusters), max_ctx 163840
// (W = 2561), verify-like rows (row j sees C + j + 1) and padded requests.
TEST(LogitsScheduleCuda, V32ShapesBitIdentical) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (int32_t batch_pad : {1, 32, 128, 256}) {
    for (int32_t n = 1; n <= 8; ++n) {
      for (int32_t G : {132, 66}) {
        const Shape s{batch_pad, n, G, 2561};
        std::vector<int32_t> row_len(size_t(batch_pad) * n, 0);
        for (int32_t b = 0; b < batch_pad; ++b) {
          if (b % 5 == 4) continue;  // padded
          const auto c = int32_t(rng.randint(0, 163840 - n));
          for (int32_t j = 0; j < n; ++j) row_len[size_t(b) * n + j] = c + j + 1;
        }
        expect_matches_ref(s, row_len);
      }
    }
  }
}

// All-zero lengths, B_pad a multiple of 32 (SPEC.md §9 rows 1 and 13): T_seg = 0, hash 0, every
// entry (B_pad, 0).
TEST(LogitsScheduleCuda, AllZeroLengths) {
  DSA_SKIP_WITHOUT_GPU();
  for (int32_t batch_pad : {0, 32, 64, 128, 256}) {
    for (int32_t n = 1; n <= 8; ++n) {
      const Shape s{batch_pad, n, 132, 2561};
      std::vector<int32_t> row_len(size_t(batch_pad) * n, 0);
      std::vector<int32_t> got = build_gpu(s, row_len);
      EXPECT_EQ(got[kScheduleWordTotalSegments], 0);
      EXPECT_EQ(got[kScheduleWordLenHash], 0);
      for (int32_t i = 0; i <= s.G; ++i) {
        ASSERT_EQ(got[size_t(kScheduleHeaderWords + 2 * i)], batch_pad) << i;
        ASSERT_EQ(got[size_t(kScheduleHeaderWords + 2 * i + 1)], 0) << i;
      }
      EXPECT_EQ(first_diff(got, build_ref(s, row_len)), "") << describe(s);
    }
  }
}

// G > T_seg: the first G - T_seg consumers are empty and start in bounds.
TEST(LogitsScheduleCuda, MoreConsumersThanSegments) {
  DSA_SKIP_WITHOUT_GPU();
  const std::vector<int32_t> row_len = {0, 0, 300, 512, 0, 0, 700, 513};  // seg [0, 2, 0, 3]
  const Shape s{4, 2, 132, 40};
  std::vector<int32_t> got = build_gpu(s, row_len);
  EXPECT_EQ(got[kScheduleWordTotalSegments], 5);
  for (int32_t i = 0; i <= s.G - 5; ++i) {
    EXPECT_EQ(got[size_t(kScheduleHeaderWords + 2 * i)], 1) << i;
    EXPECT_EQ(got[size_t(kScheduleHeaderWords + 2 * i + 1)], 0) << i;
  }
  EXPECT_EQ(first_diff(got, build_ref(s, row_len)), "");
  Rng rng(testing::test_seed());
  for (int iter = 0; iter < 50; ++iter) {
    Shape t{int32_t(rng.randint(1, 64)), int32_t(rng.randint(1, 8)), 132, 4};  // T_seg <= 64
    expect_matches_ref(t, random_row_len(rng, t));
  }
}

// Lengths above W P are clamped (and negative ones count as 0) exactly as the reference does.
TEST(LogitsScheduleCuda, LengthsAboveWPClamped) {
  DSA_SKIP_WITHOUT_GPU();
  const std::vector<int32_t> row_len = {-4, 100000, -1, -7, 90, INT32_MAX};
  const Shape s{3, 2, 4, 5};
  std::vector<int32_t> got = build_gpu(s, row_len);
  EXPECT_EQ(got[kScheduleWordTotalSegments], 4);
  EXPECT_EQ(first_diff(got, build_ref(s, row_len)), "");
  Rng rng(testing::test_seed());
  for (int32_t W : {1, 2, 3, 4, 5, 8}) {
    for (int32_t n : {1, 3, 8}) {
      const Shape t{200, n, 132, W};
      std::vector<int32_t> lens(size_t(t.batch_pad) * n);
      for (auto& v : lens) v = int32_t(rng.randint(W * kPageSize - 2, INT32_MAX));
      expect_matches_ref(t, lens);
    }
  }
}

// B_pad beyond one 256-request chunk (the carry between chunks), with G both small and large.
TEST(LogitsScheduleCuda, LargeBatchesAcrossChunks) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (int32_t batch_pad : {257, 511, 1000, 5000}) {
    for (int32_t G : {1, 132, 1000, 3001}) {
      const Shape s{batch_pad, int32_t(rng.randint(1, 8)), G, int32_t(rng.randint(1, 700))};
      expect_matches_ref(s, random_row_len(rng, s));
    }
  }
}

// The shared `dsa check` entry (independent count-based assignment and walks), run on the GPU
// builder through a host adapter.
Status gpu_builder_on_host_buffers(const LogitsScheduleParams& p) {
  const size_t rows = size_t(p.batch_pad) * size_t(p.rows_per_request);
  std::vector<int32_t> row_len(p.row_len, p.row_len + rows);
  DeviceBuffer<int32_t> d_len = dev(row_len, 1);
  DeviceBuffer<int32_t> d_out =
      dev(std::vector<int32_t>(size_t(std::max(p.schedule_capacity, 1)), kPoison), 1);
  LogitsScheduleParams q = p;
  q.row_len = d_len.data();
  q.schedule = d_out.data();
  DSA_RETURN_IF_ERROR(build_logits_schedule_cuda(q));
  return testing::copy_to_host(d_out, p.schedule, size_t(p.schedule_capacity));
}

TEST(LogitsScheduleCuda, CheckEntryPasses) {
  DSA_SKIP_WITHOUT_GPU();
  Status st =
      check_logits_schedule(gpu_builder_on_host_buffers, 128, 4, 132, 32768, testing::test_seed());
  EXPECT_TRUE(st.ok()) << st.to_string();
  st = check_logits_schedule(gpu_builder_on_host_buffers, 256, 8, 66, 5000,
                             testing::test_seed() + 1);
  EXPECT_TRUE(st.ok()) << st.to_string();
  st = check_logits_schedule(gpu_builder_on_host_buffers, 3, 1, 7, 300, testing::test_seed() + 2);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// The build captured once in a CUDA graph and replayed after rewriting row_len in place (what
// graph mode does each forward): every replay equals the reference for the new lengths.
TEST(LogitsScheduleCuda, GraphReplayWithNewLengths) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const Shape s{128, 4, 132, 2561};
  const int32_t capacity = logits_schedule_words(s.G);
  DeviceBuffer<int32_t> d_len = dev(std::vector<int32_t>(size_t(s.batch_pad) * s.n, 0), 1);
  DeviceBuffer<int32_t> d_out = dev(std::vector<int32_t>(size_t(capacity), kPoison), 1);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaStream_t previous = cuda::current_stream();
  cuda::set_current_stream(stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  Status st = build_logits_schedule_cuda(params(s, d_len.data(), d_out.data(), capacity));
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<int32_t> row_len = random_row_len(rng, s);
    if (iter == 0) std::fill(row_len.begin(), row_len.end(), 0);
    ASSERT_EQ(cudaMemcpyAsync(d_len.data(), row_len.data(), row_len.size() * sizeof(int32_t),
                              cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<int32_t> got = host(d_out);
    std::vector<int32_t> want = build_ref(s, row_len);
    want.resize(size_t(capacity));  // drop the slack words of the reference buffer
    ASSERT_EQ(first_diff(got, want), "") << "replay " << iter;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda::set_current_stream(previous);
  cudaStreamDestroy(stream);
}

TEST(LogitsScheduleCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const Shape s{256, 8, 132, 2561};
  std::vector<int32_t> row_len = random_row_len(rng, s);
  EXPECT_EQ(first_diff(build_gpu(s, row_len), build_gpu(s, row_len)), "");
}

// Host checks are the reference's; a rejected build writes nothing.
TEST(LogitsScheduleCuda, HostRejects) {
  DSA_SKIP_WITHOUT_GPU();
  const Shape ok{2, 4, 4, 4};
  DeviceBuffer<int32_t> d_len = dev(std::vector<int32_t>(8, 3), 1);
  DeviceBuffer<int32_t> d_out = dev(std::vector<int32_t>(64, kPoison), 1);
  // Each row: the valid shape with one field (two for the overflow) changed; capacity 64.
  testing::expect_rejects(
      params(ok, d_len.data(), d_out.data(), 64), build_logits_schedule_cuda,
      {{"n 0", [](auto& p) { p.rows_per_request = 0; }, StatusCode::kInvalidArgument},
       {"n 9", [](auto& p) { p.rows_per_request = 9; }, StatusCode::kInvalidArgument},
       {"G 0", [](auto& p) { p.num_consumers = 0; }, StatusCode::kInvalidArgument},
       {"W 0", [](auto& p) { p.page_table_width = 0; }, StatusCode::kInvalidArgument},
       {"B_pad -1", [](auto& p) { p.batch_pad = -1; }, StatusCode::kInvalidArgument},
       {"B_pad 300, n 1, W P past INT32_MAX",
        [](auto& p) {
          p.batch_pad = 300;
          p.rows_per_request = 1;
          p.page_table_width = INT32_MAX / kPageSize;
        },
        StatusCode::kInvalidArgument},
       {"G 40 past the capacity", [](auto& p) { p.num_consumers = 40; },
        StatusCode::kResourceExhausted},
       {"row_len null", [](auto& p) { p.row_len = nullptr; }, StatusCode::kInvalidArgument}});
  std::vector<int32_t> out = host(d_out);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](int32_t v) { return v == kPoison; }))
      << "a rejected build must not write";
  EXPECT_TRUE(build_logits_schedule_cuda(params(ok, d_len.data(), d_out.data(), 64)).ok());
}

}  // namespace
}  // namespace dsa::kernels
