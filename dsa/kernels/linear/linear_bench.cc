// Linear-layer benchmark at V3.2 shapes (SPEC.md §8.8, §10): bf16 x bf16 -> bf16 through
// cuBLASLt for T in {1, 32, 4096} x (7168 -> 1536: q_a_proj) and (7168 -> 18432: the dense MLP's
// gate/up); the FP8 block-scaled path (the few-token wgmma kernel up to 128 tokens, cuBLASLt's
// block-scaled GEMM above) at every V3.2 FP8 projection shape for T in {1, 4, 32, 128, 4096}.
// FLOPs = 2 T in out; bytes = x + W (+ its block scales) + y once each. Weights rotate over
// several copies so small ones do not run from L2. One line per shape: µs (median of 50), TFLOP/s
// and the fraction of the measured dense-MMA ceiling (805 bf16 / 1500 fp8), TB/s and its fraction
// of 4.28, and the fraction of the roofline (max of bytes / 4.28 TB/s and FLOPs / peak). Calls
// are timed inside one CUDA graph of back-to-back calls (how the engine runs them), so neither
// host enqueueing nor a launch's fixed cost is counted.
//   usage: linear_bench [fp8|bf16 [T ...]]   (the FP8 or the bf16 decode shapes only, for the token
//   counts given)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/graph.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/testing/random.h"

namespace {

using dsa::bf16;
using dsa::Status;
using dsa::cuda::DeviceBuffer;

constexpr size_t kRotateBytes = size_t{256} << 20;  // > 4x the 50 MB L2

Status bench_shape(int32_t tokens, int32_t in, int32_t out, bool fp8, dsa::testing::Rng& rng) {
  const size_t wn = size_t(out) * in;
  const size_t w_bytes = wn * (fp8 ? 1 : sizeof(bf16));
  const size_t copies = std::clamp<size_t>(kRotateBytes / w_bytes, 2, 16);
  std::vector<bf16> hx = rng.bf16_vector(size_t(tokens) * in);
  DSA_ASSIGN_OR_RETURN(auto x, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hx)));
  DSA_ASSIGN_OR_RETURN(auto y, DeviceBuffer<bf16>::alloc(size_t(tokens) * out));
  std::vector<DeviceBuffer<bf16>> ws;
  std::vector<DeviceBuffer<uint8_t>> w8s;
  DeviceBuffer<float> sw;
  if (fp8) {
    std::vector<uint8_t> hw = rng.e4m3_vector(wn, 100.f);
    for (size_t c = 0; c < copies; ++c) {
      DSA_ASSIGN_OR_RETURN(auto w, DeviceBuffer<uint8_t>::from_host(std::span<const uint8_t>(hw)));
      w8s.push_back(std::move(w));
    }
    std::vector<float> hs(size_t((out + 127) / 128) * ((in + 127) / 128), 0x1p-9f);
    DSA_ASSIGN_OR_RETURN(sw, DeviceBuffer<float>::from_host(std::span<const float>(hs)));
  } else {
    std::vector<bf16> hw = rng.bf16_vector(wn, 0.05f);
    for (size_t c = 0; c < copies; ++c) {
      DSA_ASSIGN_OR_RETURN(auto w, DeviceBuffer<bf16>::from_host(std::span<const bf16>(hw)));
      ws.push_back(std::move(w));
    }
  }
  // One CUDA graph of `copies` back-to-back calls, each on its own weight copy, replayed as the
  // engine replays a forward: the time per call is the GPU's, without the host's enqueueing or
  // the graph launch's fixed cost (as the peer kit times its kernels: launch gaps hidden).
  std::vector<dsa::kernels::LinearParams> calls;
  for (size_t c = 0; c < copies; ++c) {
    dsa::kernels::LinearParams p;
    p.x = x.data();
    if (fp8) {
      p.weight_fp8 = w8s[c].data();
      p.weight_scale_inv = sw.data();
    } else {
      p.weight = ws[c].data();
    }
    p.y = y.data();
    p.num_tokens = tokens;
    p.in_features = in;
    p.out_features = out;
    DSA_RETURN_IF_ERROR(dsa::kernels::linear_cuda(p));  // warm-up: scratch, plans, modules
    calls.push_back(p);
  }
  DSA_ASSIGN_OR_RETURN(auto graph, dsa::cuda::Graph::capture([&] {
                         for (const auto& p : calls)
                           DSA_RETURN_IF_ERROR(dsa::kernels::linear_cuda(p));
                         return dsa::ok_status();
                       }));
  DSA_ASSIGN_OR_RETURN(double graph_us, dsa::cuda::median_us([&] { return graph.launch(); },
                                                             dsa::cuda::current_stream()));
  const double us = graph_us / double(copies);
  const double flops = 2.0 * tokens * in * out;
  const double scale_bytes = fp8 ? 4.0 * ((out + 127) / 128) * ((in + 127) / 128) : 0.0;
  const double bytes =
      double(tokens) * in * 2 + double(w_bytes) + scale_bytes + double(tokens) * out * 2;
  const double tflops = flops / (us * 1e-6) / 1e12, tbps = bytes / (us * 1e-6) / 1e12;
  const double peak = fp8 ? dsa::cuda::kH200Fp8Flops : dsa::cuda::kH200Bf16Flops;
  const double roof_us =
      std::max(bytes / dsa::cuda::kH200Bandwidth, flops / peak) * 1e6;  // SPEC.md §10
  std::printf(
      "linear %-7s T=%-5d %5d -> %-5d %9.2f us %8.2f TFLOP/s %5.1f%% of %.0f  %6.3f TB/s %5.1f%% "
      "of 4.28  %5.1f%% of roofline\n",
      fp8 ? "fp8" : "bf16-lt", tokens, in, out, us, tflops, 100.0 * tflops * 1e12 / peak,
      peak / 1e12, tbps, 100.0 * tbps * 1e12 / dsa::cuda::kH200Bandwidth, 100.0 * roof_us / us);
  return dsa::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a line per shape, even into a pipe cut short
  // Unchecked, as a release run: checked mode would add a device-to-host read per launch.
  dsa::ScopedCheckedMode unchecked(false);
  if (Status st = dsa::cuda::use_forward_stream(); !st.ok()) {
    std::fprintf(stderr, "linear_bench: %s\n", st.to_string().c_str());
    return 1;
  }
  dsa::testing::Rng rng(dsa::testing::test_seed());
  const bool fp8_only = argc > 1 && std::string_view(argv[1]) == "fp8";
  const bool bf16_only = argc > 1 && std::string_view(argv[1]) == "bf16";
  struct Shape {
    int32_t tokens, in, out;
    bool fp8;
  };
  std::vector<Shape> shapes;
  if (bf16_only) {
    // The bf16 decode shapes (cuBLASLt; with DSA_LINEAR_FEW_TOKENS=1 the few-token kernel at
    // T <= 8): V3.2's q_a and gate-up, and the tiny model's 256 -> 512 / 1024 / 6144 (its
    // attention, MLP and LM head widths).
    const int32_t bf16_shapes[][2] = {
        {7168, 1536}, {7168, 18432}, {256, 512}, {256, 1024}, {256, 6144}};
    std::vector<int32_t> tokens = {1, 4, 8, 32};
    if (argc > 2) {
      tokens.clear();
      for (int a = 2; a < argc; ++a) tokens.push_back(static_cast<int32_t>(std::atoi(argv[a])));
    }
    for (int32_t t : tokens)
      for (const auto& bs : bf16_shapes) shapes.push_back({t, bs[0], bs[1], false});
  } else if (!fp8_only) {
    for (int32_t out : {1536, 18432})
      for (int32_t t : {1, 32, 4096}) shapes.push_back({t, 7168, out, false});
  }
  // V3.2's FP8 projections: q_a, kv_a (+ rope), the indexer's wq_b-sized 7168 -> 4096, q_b,
  // o_proj, a dense MLP's down projection.
  const int32_t fp8_shapes[][2] = {{7168, 1536},  {7168, 576},   {7168, 4096},
                                   {1536, 24576}, {16384, 7168}, {2048, 7168}};
  std::vector<int32_t> fp8_tokens = {1, 4, 32, 128, 4096};
  if (fp8_only && argc > 2) {
    fp8_tokens.clear();
    for (int a = 2; a < argc; ++a) fp8_tokens.push_back(static_cast<int32_t>(std::atoi(argv[a])));
  }
  if (!bf16_only) {
    for (int32_t t : fp8_tokens)
      for (const auto& fs : fp8_shapes) shapes.push_back({t, fs[0], fs[1], true});
  }
  for (const Shape& s : shapes) {
    Status st = bench_shape(s.tokens, s.in, s.out, s.fp8, rng);
    if (!st.ok()) {
      std::fprintf(stderr, "linear_bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
