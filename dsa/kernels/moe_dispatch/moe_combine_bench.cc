// Benchmark of moe_combine_cuda at V3.2 shapes (k = 8, D = 7168, a shared expert), T in {1, 32,
// 4096}. Memory-bound (SPEC.md §10): bytes = the routed rows read (T k D bf16), the shared rows
// read and y written (T D bf16 each), ids and weights (T k 8 B). Unchecked mode (no sync).
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/moe_dispatch/moe_combine.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

constexpr int32_t kTopK = 8, kDim = 7168;

Status bench(int32_t tokens) {
  testing::Rng rng(11);
  const size_t slots = size_t(tokens) * kTopK;
  const std::vector<bf16> routed = rng.bf16_vector(slots * kDim);
  const std::vector<bf16> shared = rng.bf16_vector(size_t(tokens) * kDim);
  std::vector<int32_t> ids(slots);
  std::vector<float> weights(slots);
  for (size_t s = 0; s < slots; ++s) {
    ids[s] = int32_t(rng.randint(0, 255));
    weights[s] = std::fabs(rng.normal());
  }
  DSA_ASSIGN_OR_RETURN(auto dr, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(routed)));
  DSA_ASSIGN_OR_RETURN(auto ds, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(shared)));
  DSA_ASSIGN_OR_RETURN(auto di,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(ids)));
  DSA_ASSIGN_OR_RETURN(auto dw,
                       cuda::DeviceBuffer<float>::from_host(std::span<const float>(weights)));
  DSA_ASSIGN_OR_RETURN(auto dy, cuda::DeviceBuffer<bf16>::alloc(size_t(tokens) * kDim));
  const MoeCombineParams p{dr.data(), di.data(), dw.data(), ds.data(),
                           dy.data(), tokens,    kTopK,     kDim};
  DSA_ASSIGN_OR_RETURN(
      double us, cuda::median_us([&] { return moe_combine_cuda(p); }, cuda::current_stream()));
  char what[64];
  std::snprintf(what, sizeof what, "moe_combine T=%d k=%d D=%d", tokens, kTopK, kDim);
  const double bytes =
      double(slots) * kDim * sizeof(bf16) + 2.0 * tokens * kDim * sizeof(bf16) + double(slots) * 8;
  cuda::print_bandwidth(what, us, bytes);
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  return cuda::run_shapes<int32_t>("moe_combine_bench", {1, 32, 4096}, bench);
}
