// Strided-batched linear benchmark at the absorbed MLA's V3.2 shapes (SPEC.md §8.4): 128 heads,
// q_nope W_UK (128 -> 512, q [T, H, 192] -> q_mla [T, H, 576]) and o_lat W_UV^T (512 -> 128),
// T in {1, 4, 32, 128, 4096}. Each shape is timed as one batched call and as 128 per-head calls
// (batch 1 on each head's strided slice: the per-head GEMMs the model ran before, without their
// copies), each inside a CUDA graph (how the engine runs them); one line per shape and form with
// µs (median of 50), TB/s (x + W + y once each) and the graph's node count.
//   usage: batched_linear_bench
#include <cuda_runtime.h>

#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/graph.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/batched_linear/batched_linear.h"
#include "dsa/testing/random.h"

namespace {

using dsa::bf16;
using dsa::Status;
using dsa::cuda::DeviceBuffer;
using dsa::kernels::BatchedLinearParams;

constexpr int32_t kHeads = 128;

Status time_calls(const char* name, const std::vector<BatchedLinearParams>& calls, double bytes) {
  for (const auto& p : calls) DSA_RETURN_IF_ERROR(dsa::kernels::batched_linear_cuda(p));  // warm
  DSA_ASSIGN_OR_RETURN(auto graph, dsa::cuda::Graph::capture([&] {
                         for (const auto& p : calls)
                           DSA_RETURN_IF_ERROR(dsa::kernels::batched_linear_cuda(p));
                         return dsa::ok_status();
                       }));
  DSA_ASSIGN_OR_RETURN(
      double us, dsa::cuda::median_us([&] { return graph.launch(); }, dsa::cuda::current_stream()));
  const BatchedLinearParams& p = calls.front();
  std::printf("batched_linear %-8s H=%d T=%-5d %4d -> %-4d %9.2f us %6.3f TB/s %5zu nodes\n", name,
              kHeads, p.num_tokens, p.in_features, p.out_features, us, bytes / (us * 1e-6) / 1e12,
              graph.num_nodes());
  return dsa::ok_status();
}

Status bench_shape(int32_t tokens, int32_t in, int32_t out, int64_t x_head, int64_t y_head,
                   dsa::testing::Rng& rng) {
  const std::vector<bf16> hx = rng.bf16_vector(size_t(tokens) * kHeads * x_head);
  const std::vector<bf16> hw = rng.bf16_vector(size_t(kHeads) * out * in, 0.05f);
  DSA_ASSIGN_OR_RETURN(auto x, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hx)));
  DSA_ASSIGN_OR_RETURN(auto w, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hw)));
  DSA_ASSIGN_OR_RETURN(auto y, DeviceBuffer<bf16>::alloc(size_t(tokens) * kHeads * y_head));
  const BatchedLinearParams all{
      x.data(),        w.data(), y.data(),          kHeads,          tokens, in, out,
      kHeads * x_head, x_head,   int64_t{out} * in, kHeads * y_head, y_head};
  const double bytes = 2.0 * kHeads * (double(tokens) * (in + out) + double(in) * out);
  DSA_RETURN_IF_ERROR(time_calls("batched", {all}, bytes));
  std::vector<BatchedLinearParams> per_head;
  for (int32_t h = 0; h < kHeads; ++h) {
    BatchedLinearParams p = all;
    p.batch = 1;
    p.x += h * x_head;
    p.weight += int64_t{h} * out * in;
    p.y += h * y_head;
    per_head.push_back(p);
  }
  return time_calls("per-head", per_head, bytes);
}

}  // namespace

int main() {
  dsa::ScopedCheckedMode unchecked(false);
  if (Status st = dsa::cuda::use_forward_stream(); !st.ok()) {
    std::fprintf(stderr, "batched_linear_bench: %s\n", st.to_string().c_str());
    return 1;
  }
  dsa::testing::Rng rng(dsa::testing::test_seed());
  for (int32_t t : {1, 4, 32, 128, 4096}) {
    for (Status st :
         {bench_shape(t, 128, 512, 192, 576, rng), bench_shape(t, 512, 128, 512, 128, rng)}) {
      if (!st.ok()) {
        std::fprintf(stderr, "batched_linear_bench: %s\n", st.to_string().c_str());
        return 1;
      }
    }
  }
  return 0;
}
