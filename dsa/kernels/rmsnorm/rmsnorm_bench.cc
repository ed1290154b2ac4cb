// RMSNorm, residual-add and fused add + RMSNorm benchmark at V3.2 widths (SPEC.md §10:
// memory-bound, bytes = each input read once + each output written once). Inputs rotate over
// several copies so repeated launches do not run from L2. Prints one line per op and shape: µs
// (median of 50), bytes, TB/s and the fraction of the measured H200 copy bandwidth.
//   usage: rmsnorm_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/testing/random.h"

namespace {

using dsa::bf16;
using dsa::Status;
using dsa::cuda::DeviceBuffer;

constexpr size_t kRotateBytes = size_t{256} << 20;  // > 4x the 50 MB L2

void report(const char* op, int32_t tokens, int32_t dim, double us, double bytes) {
  const double tbps = bytes / (us * 1e-6) / 1e12;
  std::printf("%-13s T=%-5d D=%-5d %9.2f us %10.3f MB %7.3f TB/s %5.1f%% of %.2f TB/s\n", op,
              tokens, dim, us, bytes / 1e6, tbps, 100.0 * tbps * 1e12 / dsa::cuda::kH200Bandwidth,
              dsa::cuda::kH200Bandwidth / 1e12);
}

Status bench_shape(int32_t tokens, int32_t dim, dsa::testing::Rng& rng) {
  const size_t n = size_t(tokens) * dim;
  const size_t copies = std::clamp<size_t>(kRotateBytes / (4 * n), 1, 16);
  std::vector<bf16> hx = rng.bf16_vector(n), hw = rng.bf16_vector(size_t(dim));
  std::vector<DeviceBuffer<bf16>> xs, ys;
  for (size_t c = 0; c < copies; ++c) {
    DSA_ASSIGN_OR_RETURN(auto x, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hx)));
    DSA_ASSIGN_OR_RETURN(auto y, DeviceBuffer<bf16>::alloc(n));
    xs.push_back(std::move(x));
    ys.push_back(std::move(y));
  }
  DSA_ASSIGN_OR_RETURN(auto w, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hw)));
  cudaStream_t stream = dsa::cuda::current_stream();

  size_t i = 0;
  DSA_ASSIGN_OR_RETURN(double us, dsa::cuda::median_us(
                                      [&] {
                                        dsa::kernels::RmsNormParams p;
                                        p.x = xs[i % copies].data();
                                        p.y = ys[i % copies].data();
                                        ++i;
                                        p.weight = w.data();
                                        p.num_tokens = tokens;
                                        p.dim = dim;
                                        return dsa::kernels::rmsnorm_cuda(p);
                                      },
                                      stream));
  report("rmsnorm", tokens, dim, us, 2.0 * n * sizeof(bf16) + dim * sizeof(bf16));

  i = 0;
  DSA_ASSIGN_OR_RETURN(
      us, dsa::cuda::median_us(
              [&] {
                const size_t c = i++ % copies;
                return dsa::kernels::residual_add_cuda({ys[c].data(), xs[c].data(), tokens, dim});
              },
              stream));
  report("residual_add", tokens, dim, us, 3.0 * n * sizeof(bf16));

  // The fused pair: h (ys) += add (xs), then the norm of h into a third set of rows.
  std::vector<DeviceBuffer<bf16>> outs;
  for (size_t c = 0; c < copies; ++c) {
    DSA_ASSIGN_OR_RETURN(auto o, DeviceBuffer<bf16>::alloc(n));
    outs.push_back(std::move(o));
  }
  i = 0;
  DSA_ASSIGN_OR_RETURN(us, dsa::cuda::median_us(
                               [&] {
                                 const size_t c = i++ % copies;
                                 dsa::kernels::AddRmsNormParams p;
                                 p.h = ys[c].data();
                                 p.add = xs[c].data();
                                 p.weight = w.data();
                                 p.y = outs[c].data();
                                 p.num_tokens = tokens;
                                 p.dim = dim;
                                 return dsa::kernels::add_rmsnorm_cuda(p);
                               },
                               stream));
  report("add_rmsnorm", tokens, dim, us, 4.0 * n * sizeof(bf16) + dim * sizeof(bf16));
  return dsa::ok_status();
}

}  // namespace

int main() {
  // Unchecked, as a release run: checked mode would add a device-to-host read per launch.
  dsa::ScopedCheckedMode unchecked(false);
  dsa::testing::Rng rng(dsa::testing::test_seed());
  struct Shape {
    int32_t tokens, dim;
  } shapes[] = {{4096, 7168}, {32, 7168}, {1, 7168}, {4096, 1536}, {4096, 512}};
  for (const Shape& s : shapes) {
    Status st = bench_shape(s.tokens, s.dim, rng);
    if (!st.ok()) {
      std::fprintf(stderr, "rmsnorm_bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
