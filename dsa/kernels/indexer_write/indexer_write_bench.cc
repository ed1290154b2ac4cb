// Benchmark of indexer_write_cuda at V3.2 shapes (D_i = 128, P = 64): T in {128, 4096} new keys
// scattered to shuffled slots of a pool much larger than L2. Bytes per SPEC.md §10:
// T (2 D_i + D_i + 4) (bf16 keys read, e4m3 codes and fp32 scale written). Unchecked mode (the
// production setting: no sync after the launch).
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/indexer_write/indexer_write.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

Status bench(int32_t tokens) {
  testing::Rng rng(1234);
  const int32_t num_pages = 32768;  // 277 MB pool: the writes land far apart, as in serving
  std::vector<bf16> k = rng.bf16_vector(size_t(tokens) * kIndexHeadDim, 2.f);
  std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
  std::vector<int32_t> slot(perm.begin(), perm.begin() + tokens);
  DSA_ASSIGN_OR_RETURN(auto dk, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(k)));
  DSA_ASSIGN_OR_RETURN(auto dslot,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(slot)));
  DSA_ASSIGN_OR_RETURN(
      auto dpool, cuda::DeviceBuffer<uint8_t>::alloc(size_t(num_pages) *
                                                     indexer_page_bytes(kPageSize, kIndexHeadDim)));
  DSA_RETURN_IF_ERROR(dpool.fill_bytes(0));
  IndexerWriteParams p;
  p.k = dk.data();
  p.slot = dslot.data();
  p.num_tokens = tokens;
  p.pool.data = dpool.data();
  p.pool.num_pages = num_pages;
  DSA_ASSIGN_OR_RETURN(double us, cuda::median_us([&] { return indexer_write_cuda(p); },
                                                  cuda::current_stream(), 10, 200));
  const double bytes = double(tokens) * (2 * kIndexHeadDim + kIndexHeadDim + 4);
  const double tbps = bytes / (us * 1e-6) / 1e12;
  std::printf(
      "indexer_write T=%-5d D_i=128  %8.2f us  %10.0f B  %6.3f TB/s  %5.1f%% of %.2f TB/s\n",
      tokens, us, bytes, tbps, 100.0 * tbps * 1e12 / cuda::kH200Bandwidth,
      cuda::kH200Bandwidth / 1e12);
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  for (int32_t tokens : {128, 4096}) {
    Status st = bench(tokens);
    if (!st.ok()) {
      std::fprintf(stderr, "indexer_write_bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
