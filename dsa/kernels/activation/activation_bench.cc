// Benchmark of swiglu_cuda at V3.2 widths (SPEC.md §10: memory-bound; bytes = gate and up read
// once, the activation written once, 6 n). Widths: the dense MLP's 18432 and a routed expert's
// 2048 (rows * k grouped rows). Unchecked mode, as a release run (no sync after the launch).
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/activation/activation.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

Status bench(int64_t rows, int64_t width) {
  testing::Rng rng(7);
  const size_t n = size_t(rows * width);
  const std::vector<bf16> g = rng.bf16_vector(n, 2.f), u = rng.bf16_vector(n);
  DSA_ASSIGN_OR_RETURN(auto dg, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(g)));
  DSA_ASSIGN_OR_RETURN(auto du, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(u)));
  DSA_ASSIGN_OR_RETURN(auto dout, cuda::DeviceBuffer<bf16>::alloc(n));
  const SwigluParams p{dg.data(), du.data(), dout.data(), int64_t(n)};
  DSA_ASSIGN_OR_RETURN(double us,
                       cuda::median_us([&] { return swiglu_cuda(p); }, cuda::current_stream()));
  char what[64];
  std::snprintf(what, sizeof what, "swiglu rows=%lld width=%lld", (long long)rows,
                (long long)width);
  cuda::print_bandwidth(what, us, 3.0 * double(n) * sizeof(bf16));
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  struct Shape {
    int64_t rows, width;
  };
  return cuda::run_shapes<Shape>("activation_bench",
                                 {{1, 18432}, {32, 18432}, {4096, 18432}, {32768, 2048}},
                                 [](Shape s) { return bench(s.rows, s.width); });
}
