// Benchmark of ragged_logits_cuda for one causal prompt chunk at V3.2 shapes (H_i = 64,
// D_i = 128): T query rows after a prefix of P cached keys over S = P + T gathered keys, row t
// sees keys [0, P + t + 1), compressed logits [T, S] fp32, unchecked mode. Shapes: whole prompts
// (P = 0, T = 8K and 32K: 4.3 GB of logits at 32K) and chunks of a long prompt (T = 2048 after
// 30K, T = 512 after 7.5K, T = 64 after 64K: few rows, the key range sliced over CTAs). Per shape:
// the grid, median µs, the §10 bytes S (D_i + 4) + 4 (written logits) as TB/s and a fraction of
// 4.28 TB/s, and the FLOPs 2 H_i D_i (scored pairs) as TFLOP/s and a fraction of 1500.
//   usage: ragged_logits_bench [iters]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/splitmix64.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"
#include "dsa/kernels/ragged_logits/ragged_logits_launch.h"

namespace {

using namespace dsa;           // NOLINT: a benchmark main
using namespace dsa::kernels;  // NOLINT

constexpr int32_t kHeads = 64, kDim = 128;

using SplitMix = SplitMix64;

// Random e4m3 codes with bit 6 clear: |v| < 2, never NaN.
std::vector<uint8_t> random_codes(SplitMix& rng, size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng.next() & 0xBFBFBFBFBFBFBFBFull;
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

template <class T>
StatusOr<cuda::DeviceBuffer<T>> upload(const std::vector<T>& v) {
  return cuda::DeviceBuffer<T>::from_host(std::span<const T>(v));
}

Status run(int iters) {
  cudaDeviceProp prop{};
  DSA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  std::printf("ragged_logits_cuda on %s, H_i = %d, D_i = %d, causal chunk, unchecked\n", prop.name,
              kHeads, kDim);
  std::printf("%6s %6s %9s %11s %9s %8s %6s %9s %6s\n", "T", "P", "grid", "us", "MB", "TB/s",
              "frac", "TFLOP/s", "frac");
  DSA_ASSIGN_OR_RETURN(int32_t sms, cuda::sm_count());
  SplitMix rng{7};
  const std::pair<int32_t, int32_t> shapes[] = {
      {8192, 0}, {32768, 0}, {2048, 30720}, {512, 7680}, {64, 65472}};
  for (auto [T, P] : shapes) {
    const int32_t S = P + T;
    const std::vector<uint8_t> q = random_codes(rng, size_t(T) * kHeads * kDim);
    const std::vector<uint8_t> k8 = random_codes(rng, size_t(S) * kDim);
    std::vector<float> w(size_t(T) * kHeads), kscale(static_cast<size_t>(S));
    for (auto& v : w) v = float(int64_t(rng.next() % 2001) - 1000) * 1e-4f;
    for (auto& v : kscale) v = 1.f / float(1 << (rng.next() % 8));
    std::vector<int32_t> ks(static_cast<size_t>(T), 0), ke(static_cast<size_t>(T));
    for (int32_t t = 0; t < T; ++t) ke[size_t(t)] = P + t + 1;
    DSA_ASSIGN_OR_RETURN(auto d_q, upload(q));
    DSA_ASSIGN_OR_RETURN(auto d_k8, upload(k8));
    DSA_ASSIGN_OR_RETURN(auto d_w, upload(w));
    DSA_ASSIGN_OR_RETURN(auto d_kscale, upload(kscale));
    DSA_ASSIGN_OR_RETURN(auto d_ks, upload(ks));
    DSA_ASSIGN_OR_RETURN(auto d_ke, upload(ke));
    const int64_t ld = (S + 3) / 4 * 4;
    DSA_ASSIGN_OR_RETURN(auto d_logits, cuda::DeviceBuffer<float>::alloc(size_t(T) * ld));
    RaggedLogitsParams p{
        d_q.data(), d_w.data(), d_k8.data(), d_kscale.data(), d_ks.data(), d_ke.data(),        T,
        S,          kHeads,     kDim,        d_logits.data(), ld,          int64_t{T} * ld * 4};
    {
      ScopedCheckedMode checked(true);  // one checked launch: the data is in contract
      DSA_RETURN_IF_ERROR(ragged_logits_cuda(p));
    }
    ScopedCheckedMode unchecked(false);
    DSA_ASSIGN_OR_RETURN(double us, cuda::median_us([&] { return ragged_logits_cuda(p); },
                                                    cuda::current_stream(), 1, iters));
    const double pairs = double(T) * P + double(T) * (T + 1) / 2;  // scored (row, key) pairs
    const double bytes = double(S) * (kDim + 4) + 4.0 * pairs;
    const double flops = 2.0 * kHeads * kDim * pairs;
    const double s = us * 1e-6;
    const RaggedLogitsGrid g = ragged_logits_grid(T, S, kHeads, sms);
    char grid[32];
    std::snprintf(grid, sizeof grid, "%dx%d", g.row_groups, g.slices);
    std::printf("%6d %6d %9s %11.1f %9.1f %8.3f %6.3f %9.1f %6.3f\n", T, P, grid, us, bytes / 1e6,
                bytes / s / 1e12, bytes / s / cuda::kH200Bandwidth, flops / s / 1e12,
                flops / s / cuda::kH200Fp8Flops);
    std::fflush(stdout);
  }
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 5;
  const Status st = run(iters);
  if (!st.ok()) {
    std::fprintf(stderr, "ragged_logits_bench: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
