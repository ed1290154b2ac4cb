// Benchmark of indexer_q_quant_cuda at V3.2 shapes (H_i = 64, D_i = 128), T in {1, 32, 4096}.
// Memory-bound (SPEC.md §10): bytes = T H_i (2 D_i + D_i + 8) (bf16 queries read, e4m3 codes
// written, each fp32 weight read and written). Unchecked mode (no sync).
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

constexpr int32_t kHeads = 64;

Status bench(int32_t tokens) {
  testing::Rng rng(5);
  const int64_t blocks = int64_t{tokens} * kHeads;
  const std::vector<bf16> q = rng.bf16_vector(size_t(blocks) * kIndexHeadDim, 4.f);
  const std::vector<float> w = rng.normal_vector(size_t(blocks));
  DSA_ASSIGN_OR_RETURN(auto dq, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(q)));
  DSA_ASSIGN_OR_RETURN(auto dw, cuda::DeviceBuffer<float>::from_host(std::span<const float>(w)));
  DSA_ASSIGN_OR_RETURN(auto dq8, cuda::DeviceBuffer<uint8_t>::alloc(q.size()));
  // Every launch scales w in place again; the values of w do not change the work.
  const float fold = static_cast<float>(1.0 / std::sqrt(double(kHeads) * kIndexHeadDim));
  const IndexerQuantParams p{dq.data(), dq8.data(), dw.data(), blocks, fold};
  DSA_ASSIGN_OR_RETURN(
      double us, cuda::median_us([&] { return indexer_q_quant_cuda(p); }, cuda::current_stream()));
  char what[64];
  std::snprintf(what, sizeof what, "indexer_q_quant T=%d H_i=%d", tokens, kHeads);
  cuda::print_bandwidth(what, us, double(blocks) * (3 * kIndexHeadDim + 8));
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  return cuda::run_shapes<int32_t>("indexer_q_quant_bench", {1, 32, 4096}, bench);
}
