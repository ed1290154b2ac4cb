// Benchmark of topk_cuda (SPEC.md §3e, §10): R rows of L fp32 logits drawn from N(0, 1), every
// row of length L (ld = L), K = 2048, unchecked mode (no synchronisation inside the op). Bytes per
// §10: 4 R L (logits) + 4 R K (idx). Rows of L >= 64K take the cluster path by default; the
// "1cta" lines force one CTA per row for comparison.
//
//   build/bench/topk_bench
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/testing/random.h"

namespace {

using dsa::Status;
using dsa::cuda::DeviceBuffer;

struct Shape {
  int32_t rows, len;
};

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
  for (bool one_cta : {false, true}) {
    if (one_cta && s.len < p.long_row_min_len) continue;
    dsa::kernels::TopkParams q = p;
    if (one_cta) q.long_row_min_len = INT32_MAX;
    DSA_ASSIGN_OR_RETURN(double us, dsa::cuda::median_us([&] { return dsa::kernels::topk_cuda(q); },
                                                         dsa::cuda::current_stream(), 10, 200));
    const double tbps = bytes / (us * 1e-6) / 1e12;
    std::printf("%s\n",
                fmt::format("topk R={:<4} L={:<7} K={} path={:<7} {:9.2f} us  {:8.2f} MB  "
                            "{:6.3f} TB/s  {:5.1f}% of {:.2f} TB/s",
                            s.rows, s.len, k,
                            one_cta ? "1cta" : (s.len >= p.long_row_min_len ? "cluster" : "1cta"),
                            us, bytes / 1e6, tbps, 100.0 * tbps * 1e12 / dsa::cuda::kH200Bandwidth,
                            dsa::cuda::kH200Bandwidth / 1e12)
                    .c_str());
  }
  return dsa::ok_status();
}

}  // namespace

int main() {
  dsa::set_checked_mode(false);  // timing without the per-call error-word synchronisation
  dsa::testing::Rng rng(1234);
  const Shape shapes[] = {{32, 8192},   {32, 32768},  {32, 65536},
                          {128, 32768}, {128, 65536}, {4, 131072}};
  for (const Shape& s : shapes) {
    Status st = bench_shape(s, 2048, rng);
    if (!st.ok()) {
      std::fprintf(stderr, "topk_bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
