// memcpy_async between device and page-locked host memory runs as a kernel (pinned_copy.h): every
// size and alignment it takes copies exactly what the copy engine would, in both directions, in
// stream order with the work around it, and inside a captured graph (read at replay, not at
// capture); what it does not take (pageable memory, device to device, above the size bound) goes
// to the copy engine and is just as exact.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsa/cuda/device_memory.h"
#include "dsa/cuda/pinned_copy.h"
#include "dsa/cuda/slow_fill_test_kernel.h"
#include "dsa/cuda/stream.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::cuda {
namespace {

using testing::or_die;

// Page-locked and device buffers of `bytes` plus 16 bytes of slack for the offsets.
struct Buffers {
  explicit Buffers(size_t bytes) : size(bytes + 16) {
    pinned = static_cast<uint8_t*>(or_die(pinned_host_malloc(size)));
    device = static_cast<uint8_t*>(or_die(device_malloc(size)));
  }
  ~Buffers() {
    pinned_host_free(pinned);
    device_free(device);
  }
  size_t size;
  uint8_t* pinned;
  uint8_t* device;
};

std::vector<uint8_t> random_bytes(size_t n, testing::Rng& rng) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = uint8_t(rng.randint(0, 255));
  return v;
}

TEST(PinnedCopyCuda, BothDirectionsEverySizeAndAlignment) {
  DSA_SKIP_WITHOUT_GPU();
  testing::Rng rng(testing::test_seed());
  const size_t sizes[] = {1, 3, 4, 12, 16, 20, 48, 1000, 50332, 65540, kPinnedCopyMaxBytes - 16};
  const size_t offsets[][2] = {{0, 0}, {1, 0}, {0, 4}, {4, 4}, {8, 8}, {3, 7}};
  for (size_t bytes : sizes) {
    for (const auto& off : offsets) {
      SCOPED_TRACE(::testing::Message()
                   << bytes << " bytes, host offset " << off[0] << ", device offset " << off[1]);
      Buffers b(bytes);
      const std::vector<uint8_t> want = random_bytes(bytes, rng);
      std::memcpy(b.pinned + off[0], want.data(), bytes);
      // Poison around the target range: a copy that writes past either end is caught.
      ASSERT_EQ(cudaMemset(b.device, 0xA5, b.size), cudaSuccess);
      ASSERT_TRUE(pinned_copy_applies(b.device + off[1], b.pinned + off[0], bytes));
      ASSERT_TRUE(memcpy_async(b.device + off[1], b.pinned + off[0], bytes).ok());
      std::vector<uint8_t> got(b.size);
      ASSERT_EQ(cudaStreamSynchronize(current_stream()), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got.data(), b.device, b.size, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(
          std::vector<uint8_t>(got.begin() + long(off[1]), got.begin() + long(off[1] + bytes)),
          want);
      for (size_t i = 0; i < b.size; ++i) {
        if (i < off[1] || i >= off[1] + bytes) {
          ASSERT_EQ(got[i], 0xA5) << "device byte " << i;
        }
      }
      // Back: device to page-locked host, over a poisoned host buffer.
      std::memset(b.pinned, 0x5A, b.size);
      ASSERT_TRUE(pinned_copy_applies(b.pinned + off[0], b.device + off[1], bytes));
      ASSERT_TRUE(memcpy_async(b.pinned + off[0], b.device + off[1], bytes).ok());
      ASSERT_TRUE(synchronize_stream().ok());
      EXPECT_EQ(std::memcmp(b.pinned + off[0], want.data(), bytes), 0);
      for (size_t i = 0; i < b.size; ++i) {
        if (i < off[0] || i >= off[0] + bytes) {
          ASSERT_EQ(b.pinned[i], 0x5A) << "host byte " << i;
        }
      }
    }
  }
}

// Stream order both ways: the copy sees what the work before it wrote and the work after it sees
// what the copy wrote, across a chain of copies and memsets with no synchronisation between them.
TEST(PinnedCopyCuda, StreamOrderWithTheWorkAround) {
  DSA_SKIP_WITHOUT_GPU();
  const size_t n = 50332;
  Buffers a(n), b(n);
  std::memset(a.pinned, 1, n);
  ASSERT_TRUE(memset_async(a.device, 7, n).ok());
  ASSERT_TRUE(memcpy_async(a.device, a.pinned, n / 2).ok());  // over the memset's first half
  ASSERT_TRUE(memcpy_async(b.device, a.device, n).ok());      // device to device: copy engine
  ASSERT_TRUE(memcpy_async(b.pinned, b.device, n).ok());
  ASSERT_TRUE(synchronize_stream().ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.pinned[i], i < n / 2 ? 1 : 7) << i;
}

TEST(PinnedCopyCuda, InsideAGraphReadsAtReplay) {
  DSA_SKIP_WITHOUT_GPU();
  const size_t n = 4096 + 12;
  Buffers b(n);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaStream_t before = current_stream();
  set_current_stream(s);
  std::memset(b.pinned, 3, n);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status st = memcpy_async(b.device, b.pinned, n);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.to_string();
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    std::memset(b.pinned, 10 + round, n);  // after capture: the replay must read this
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    std::vector<uint8_t> got(n);
    ASSERT_EQ(cudaMemcpyAsync(got.data(), b.device, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 10 + round) << "round " << round << " " << i;
  }
  set_current_stream(before);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// copy_word_runs_async: the runs' words and no other, in one kernel per kMaxWordRuns runs from
// page-locked memory (70 runs: three launches; empty and adjacent runs among them), and through
// the copy engine from pageable memory the one span that holds them all.
TEST(PinnedCopyCuda, WordRunsCopyTheirWordsOnly) {
  DSA_SKIP_WITHOUT_GPU();
  testing::Rng rng(testing::test_seed());
  const size_t n = 20000;
  Buffers b(n * 4);
  int32_t* pinned = reinterpret_cast<int32_t*>(b.pinned);
  int32_t* device = reinterpret_cast<int32_t*>(b.device);
  std::vector<int32_t> pageable(n);
  for (size_t i = 0; i < n; ++i) pinned[i] = pageable[i] = int32_t(rng.randint(0, 1 << 30));
  std::vector<WordRun> runs;
  std::vector<bool> covered(n, false);
  uint32_t at = 0;
  while (runs.size() < 70) {
    const uint32_t gap = uint32_t(rng.randint(0, 3)), len = uint32_t(rng.randint(0, 300));
    if (at + gap + len > n) break;
    runs.push_back({at + gap, len});
    for (uint32_t i = at + gap; i < at + gap + len; ++i) covered[i] = true;
    at += gap + len;
  }
  ASSERT_GT(runs.size(), 2 * kMaxWordRuns);
  for (const bool from_pinned : {true, false}) {
    SCOPED_TRACE(from_pinned ? "page-locked source (kernel)" : "pageable source (copy engine)");
    ASSERT_EQ(cudaMemset(device, 0xFF, n * 4), cudaSuccess);
    const int32_t* src = from_pinned ? pinned : pageable.data();
    ASSERT_TRUE(copy_word_runs_async(device, src, runs.data(), runs.size()).ok());
    std::vector<int32_t> got(n);
    ASSERT_EQ(cudaStreamSynchronize(current_stream()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), device, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    // The kernel copies the runs' words only; the copy engine the whole span between the first
    // and the last run.
    size_t lo = n, hi = 0;
    for (const WordRun& r : runs) {
      if (r.words == 0) continue;
      lo = std::min<size_t>(lo, r.offset);
      hi = size_t{r.offset} + r.words;  // the runs ascend
    }
    for (size_t i = 0; i < n; ++i) {
      const bool copied = from_pinned ? covered[i] : i >= lo && i < hi;
      ASSERT_EQ(got[i], copied ? pageable[i] : -1) << "word " << i;
    }
  }
}

// The kernel ahead lets the copy start at once (pdl_trigger first) and writes only after ~300 us.
// Host to device, the copy reads its source early (pinned_copy.h) but must write after that
// kernel's words: the copy's words are left. Device to host it must read after them: the
// kernel's words come back. Both the plain copy and the word runs.
TEST(PinnedCopyCuda, ASlowKernelAheadIsWaitedFor) {
  DSA_SKIP_WITHOUT_GPU();
  const size_t n = 4096;
  Buffers b(n * 4);
  int32_t* pinned = reinterpret_cast<int32_t*>(b.pinned);
  int32_t* device = reinterpret_cast<int32_t*>(b.device);
  const auto read_device = [&] {
    std::vector<int32_t> got(n);
    EXPECT_EQ(cudaStreamSynchronize(current_stream()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(got.data(), device, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return got;
  };
  for (size_t i = 0; i < n; ++i) pinned[i] = int32_t(1000 + i);
  ASSERT_EQ(pinned_copy_direction(device, pinned, n * 4), PinnedCopy::kToDevice);
  ASSERT_TRUE(test_kernels::launch_slow_fill(device, n, 7, 300).ok());
  ASSERT_TRUE(memcpy_async(device, pinned, n * 4).ok());
  std::vector<int32_t> got = read_device();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], int32_t(1000 + i)) << "word " << i;

  const std::vector<WordRun> runs = {{3, 100}, {200, 1}, {1000, 3000}};
  ASSERT_TRUE(test_kernels::launch_slow_fill(device, n, 7, 300).ok());
  ASSERT_TRUE(copy_word_runs_async(device, pinned, runs.data(), runs.size()).ok());
  got = read_device();
  for (size_t i = 0; i < n; ++i) {
    const bool copied = std::any_of(runs.begin(), runs.end(), [&](const WordRun& r) {
      return i >= r.offset && i < size_t{r.offset} + r.words;
    });
    ASSERT_EQ(got[i], copied ? int32_t(1000 + i) : 7) << "word " << i;
  }

  ASSERT_EQ(pinned_copy_direction(pinned, device, n * 4), PinnedCopy::kToHost);
  ASSERT_TRUE(test_kernels::launch_slow_fill(device, n, 9, 300).ok());
  ASSERT_TRUE(memcpy_async(pinned, device, n * 4).ok());
  ASSERT_TRUE(synchronize_stream().ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(pinned[i], 9) << "word " << i;
}

TEST(PinnedCopyCuda, TheCopyEngineKeepsTheRest) {
  DSA_SKIP_WITHOUT_GPU();
  const size_t n = 1000;
  Buffers a(kPinnedCopyMaxBytes + 64), b(n);
  std::vector<uint8_t> pageable(n, 9);
  EXPECT_FALSE(pinned_copy_applies(b.device, pageable.data(), n));  // pageable host memory
  EXPECT_FALSE(pinned_copy_applies(b.device, a.device, n));         // device to device
  EXPECT_FALSE(pinned_copy_applies(a.pinned, b.pinned, n));         // host to host
  EXPECT_FALSE(pinned_copy_applies(a.device, a.pinned, kPinnedCopyMaxBytes + 1));  // too large
  EXPECT_FALSE(pinned_copy_applies(b.device, b.pinned, 0));
  // A kernel copy asked for where there is none: refused, nothing launched.
  EXPECT_EQ(pinned_copy_async(b.device, a.device, n, PinnedCopy::kCopyEngine).code(),
            StatusCode::kInvalidArgument);
  // And what the copy engine does is exact too: pageable in, a large page-locked copy out.
  ASSERT_TRUE(memcpy_async(b.device, pageable.data(), n).ok());
  ASSERT_TRUE(memset_async(a.device, 4, kPinnedCopyMaxBytes + 64).ok());
  ASSERT_TRUE(memcpy_async(a.device + 8, b.device, n).ok());
  ASSERT_TRUE(memcpy_async(a.pinned, a.device, kPinnedCopyMaxBytes + 64).ok());
  ASSERT_TRUE(synchronize_stream().ok());
  for (size_t i = 0; i < kPinnedCopyMaxBytes + 64; ++i) {
    ASSERT_EQ(a.pinned[i], i >= 8 && i < 8 + n ? 9 : 4) << i;
  }
}

}  // namespace
}  // namespace dsa::cuda
