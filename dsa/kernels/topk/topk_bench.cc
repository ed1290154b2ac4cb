// Benchmark of topk_cuda (SPEC.md §3e, §10): R rows of L fp32 logits drawn from N(0, 1), every
// row of length L (ld = L), K = 2048, unchecked mode (no synchronisation inside the op). Bytes per
// §10: 4 R L (logits) + 4 R K (idx). Each line names the launch topk_cuda chose (one-pass or
// stream kernel, CTAs per row); a "stream" line times the streaming kernel at the same shape.
//
//   build/bench/topk_bench
//
// Peer mode (scripts/bench_vs_peers.sh), TensorRT-LLM anchor's shapes and timing method
// (cuda/bench_cold.h): fp32 N(0, 1) logits, contiguous [rows, L], every row of length L:
//   topk_bench --shape rows=32,L=8K [--shape ...] [--iters N]
// One "bench=dsa_topk rows= L= k= us= ... path=onepass cluster=C" line per shape (the default
// dispatch), and a "bench=dsa_topk_stream" line for the streaming kernel at the same shape.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_cold.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/kernels/topk/topk_cuda_launch.h"
#include "dsa/testing/random.h"

namespace {

using dsa::Status;
using dsa::cuda::DeviceBuffer;

struct Shape {
  int32_t rows, len;
};

const char* path_name(const dsa::kernels::TopkLaunch& l) {
  return l.path == dsa::kernels::TopkLaunch::Path::kStream ? "stream" : "onepass";
}

// The default launch first, then the other kernel at the same shape (the one-pass kernel with its
// own cluster rule, or the streaming kernel), and with `all_clusters` every one-pass cluster size
// that holds the rows.
std::vector<dsa::kernels::TopkParams> launch_variants(const dsa::kernels::TopkParams& p, int sms,
                                                      bool all_clusters) {
  using dsa::kernels::TopkLaunch;
  std::vector<dsa::kernels::TopkParams> out = {p};
  const TopkLaunch def = dsa::kernels::choose_topk_launch(p, sms);
  dsa::kernels::TopkParams stream = p, onepass = p;
  stream.max_chunk = 512;
  onepass.stream_min_rows = INT32_MAX;
  const TopkLaunch one = dsa::kernels::choose_topk_launch(onepass, sms);
  if (def.path == TopkLaunch::Path::kOnePass) {
    if (dsa::kernels::choose_topk_launch(stream, sms).path == TopkLaunch::Path::kStream)
      out.push_back(stream);
  } else if (one.path == TopkLaunch::Path::kOnePass) {
    out.push_back(onepass);
  }
  if (all_clusters && one.path == TopkLaunch::Path::kOnePass) {
    for (int32_t c : {1, 2, 4, 8}) {
      dsa::kernels::TopkParams q = onepass;
      q.cluster_size = c;
      const TopkLaunch l = dsa::kernels::choose_topk_launch(q, sms);
      if (l.cluster == c && c != one.cluster) out.push_back(q);
    }
  }
  return out;
}

Status bench_shape(const Shape& s, int32_t k, dsa::testing::Rng& rng) {
  const std::vector<float> logits = rng.normal_vector(size_t(s.rows) * s.len);
  const std::vector<int32_t> lens(size_t(s.rows), s.len);
  DSA_ASSIGN_OR_RETURN(auto d_logits, DeviceBuffer<float>::from_host(logits));
  DSA_ASSIGN_OR_RETURN(auto d_len, DeviceBuffer<int32_t>::from_host(lens));
  DSA_ASSIGN_OR_RETURN(auto d_idx, DeviceBuffer<int32_t>::alloc(size_t(s.rows) * k));

  dsa::kernels::TopkParams p;
  p.logits = d_logits.data();
  p.logits_ld = s.len;
  p.rows = s.rows;
  p.len = d_len.data();
  p.k = k;
  p.out_rows = s.rows;
  p.idx = d_idx.data();

  const double bytes = 4.0 * s.rows * s.len + 4.0 * s.rows * k;
  DSA_ASSIGN_OR_RETURN(const int sms, dsa::cuda::sm_count());
  for (const dsa::kernels::TopkParams& q : launch_variants(p, sms, true)) {
    const dsa::kernels::TopkLaunch l = dsa::kernels::choose_topk_launch(q, sms);
    DSA_ASSIGN_OR_RETURN(double us, dsa::cuda::median_us([&] { return dsa::kernels::topk_cuda(q); },
                                                         dsa::cuda::current_stream(), 10, 200));
    const double tbps = bytes / (us * 1e-6) / 1e12;
    std::printf("%s\n", fmt::format("topk R={:<4} L={:<7} K={} path={:<7} cluster={} {:9.2f} us  "
                                    "{:8.2f} MB  {:6.3f} TB/s  {:5.1f}% of {:.2f} TB/s",
                                    s.rows, s.len, k, path_name(l), l.cluster, us, bytes / 1e6,
                                    tbps, 100.0 * tbps * 1e12 / dsa::cuda::kH200Bandwidth,
                                    dsa::cuda::kH200Bandwidth / 1e12)
                            .c_str());
  }
  return dsa::ok_status();
}

// Peer mode: copies x [rows, L] logits and copies x [rows, K] idx; the lengths are shared. One
// host copy of the logits is uploaded and repeated on the device (disjoint addresses are what
// makes the reads cold; the values may repeat).
Status run_peer_shape(const dsa::cuda::ShapeArg& shape, int iters, dsa::testing::Rng& rng) {
  DSA_ASSIGN_OR_RETURN(const int64_t rows64, dsa::cuda::shape_value(shape, "rows"));
  DSA_ASSIGN_OR_RETURN(const int64_t len64, dsa::cuda::shape_value(shape, "L"));
  DSA_ASSIGN_OR_RETURN(const int64_t k64, dsa::cuda::shape_value(shape, "k", 2048));
  if (rows64 < 1 || len64 < 1 || len64 % 4 != 0 || len64 > INT32_MAX / 2 || rows64 > 65536)
    return dsa::invalid_argument("topk peer shape needs rows in [1, 65536], L >= 4, L % 4 == 0");
  const auto rows = int32_t(rows64), len = int32_t(len64), k = int32_t(k64);
  const size_t cells = size_t(rows) * size_t(len);
  const double bytes = 4.0 * rows * len + 4.0 * rows * k;  // §10, read + written
  DSA_ASSIGN_OR_RETURN(const int copies, dsa::cuda::cold_copies(bytes));

  const std::vector<float> logits = rng.normal_vector(cells);
  const std::vector<int32_t> lens(size_t(rows), len);
  DSA_ASSIGN_OR_RETURN(auto d_logits, DeviceBuffer<float>::alloc(cells * size_t(copies)));
  DSA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(d_logits.data(), logits.data(), cells * 4, cudaMemcpyHostToDevice));
  for (int c = 1; c < copies; ++c)
    DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy(d_logits.data() + size_t(c) * cells, d_logits.data(),
                                        cells * 4, cudaMemcpyDeviceToDevice));
  DSA_ASSIGN_OR_RETURN(auto d_len, DeviceBuffer<int32_t>::from_host(lens));
  DSA_ASSIGN_OR_RETURN(auto d_idx, DeviceBuffer<int32_t>::alloc(size_t(copies) * rows * k));

  cudaStream_t stream_handle = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_handle, cudaStreamNonBlocking));
  dsa::cuda::set_current_stream(stream_handle);
  dsa::kernels::TopkParams p;
  p.logits_ld = len;
  p.rows = rows;
  p.len = d_len.data();
  p.k = k;
  p.out_rows = rows;
  DSA_ASSIGN_OR_RETURN(const int sms, dsa::cuda::sm_count());
  const std::vector<dsa::kernels::TopkParams> variants = launch_variants(p, sms, false);
  for (size_t v = 0; v < variants.size(); ++v) {
    const dsa::kernels::TopkParams& q = variants[v];
    const dsa::kernels::TopkLaunch l = dsa::kernels::choose_topk_launch(q, sms);
    const bool stream = v > 0 && l.path == dsa::kernels::TopkLaunch::Path::kStream;
    auto launch = [&](int c) {
      dsa::kernels::TopkParams r = q;
      r.logits = d_logits.data() + size_t(c) * cells;
      r.idx = d_idx.data() + size_t(c) * rows * k;
      return dsa::kernels::topk_cuda(r);
    };
    {
      dsa::ScopedCheckedMode checked(true);  // one checked call: the data is in contract
      DSA_RETURN_IF_ERROR(launch(0));
    }
    DSA_ASSIGN_OR_RETURN(const dsa::cuda::ColdTiming t,
                         dsa::cuda::cold_median_us(launch, copies, stream_handle, iters));
    const std::string shape_text = fmt::format("rows={} L={} k={}", rows, len, k);
    const std::string extra =
        fmt::format("logits_GBps={:.0f} path={} cluster={}", 4.0 * rows * len / (t.median_us * 1e3),
                    path_name(l), l.cluster);
    const char* name = v == 0 ? "dsa_topk" : stream ? "dsa_topk_stream" : "dsa_topk_onepass";
    dsa::cuda::print_cold_line(name, shape_text, t, bytes, 0, 0, extra);
  }
  dsa::cuda::set_current_stream(nullptr);
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamDestroy(stream_handle));
  return dsa::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  dsa::set_checked_mode(false);  // timing without the per-call error-word synchronisation
  dsa::testing::Rng rng(1234);
  if (argc > 1) {
    dsa::StatusOr<dsa::cuda::PeerArgs> args = dsa::cuda::parse_peer_args(argc, argv);
    if (!args.ok()) {
      std::fprintf(stderr, "topk_bench: %s\n", args.status().to_string().c_str());
      return 1;
    }
    if (args->shapes.empty()) {
      std::fprintf(stderr, "topk_bench: peer mode needs --shape\n");
      return 1;
    }
    // A failing shape is reported and the others still run: one device call measures them all.
    int rc = 0;
    for (size_t i = 0; i < args->shapes.size(); ++i) {
      const Status st = run_peer_shape(args->shapes[i], args->iters, rng);
      if (!st.ok()) {
        std::fprintf(stderr, "topk_bench: shape %zu: %s\n", i, st.to_string().c_str());
        rc = 1;
      }
    }
    return rc;
  }
  const Shape shapes[] = {{1, 8192},    {1, 131072},  {32, 8192},  {32, 32768},  {32, 65536},
                          {128, 32768}, {128, 65536}, {4, 131072}, {256, 131072}};
  for (const Shape& s : shapes) {
    Status st = bench_shape(s, 2048, rng);
    if (!st.ok()) {
      std::fprintf(stderr, "topk_bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
