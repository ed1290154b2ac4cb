// Benchmark of the fused decode selection against the unfused pair it replaces, in one process
// on the same inputs, with the anchors' method (cuda/bench_cold.h: cold L2 by rotating disjoint
// copies, a host gate so no call waits on the host, medians): V3.2's indexer (H_i = 64,
// D_i = 128, P = 64, K = 2048), verify-like lengths (row j of a request sees L - n + j + 1 keys),
// scattered pages. Per shape, three timings:
//   fused  paged_logits_topk_cuda;
//   pair   paged_logits_cuda then topk_cuda (kPaged), back to back on the stream, as the engine
//          runs them (the §3c schedule is built once per forward and excluded, as in
//          paged_logits_bench's peer mode);
//   logits, topk  each alone.
// and the speed-up pair / fused, the launch plan, and the fused kernel's fraction of the §10
// roofline max(bytes / 4.28 TB/s, FLOPs / 1500 TFLOP/s) with bytes = the keys, q, w, page table
// and the K slots written (no logits).
//   usage: paged_logits_topk_bench [--shape B=32,L=8K,n=1 ...] [--iters N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/splitmix64.h"
#include "dsa/cuda/bench_cold.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk_launch.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/testing/cold_indexer_pool.h"

namespace {

using namespace dsa;           // NOLINT: a benchmark main
using namespace dsa::kernels;  // NOLINT

constexpr int32_t kHeads = 64, kDim = 128, kK = 2048;

template <class T>
StatusOr<cuda::DeviceBuffer<T>> upload(const std::vector<T>& v) {
  return cuda::DeviceBuffer<T>::from_host(std::span<const T>(v));
}

Status run_shape(const cuda::ShapeArg& shape, int iters) {
  DSA_ASSIGN_OR_RETURN(const int64_t B64, cuda::shape_value(shape, "B"));
  DSA_ASSIGN_OR_RETURN(const int64_t L64, cuda::shape_value(shape, "L"));
  DSA_ASSIGN_OR_RETURN(const int64_t n64, cuda::shape_value(shape, "n", 1));
  if (B64 < 1 || L64 < 1 || n64 < 1 || n64 > 8 || L64 > (int64_t{1} << 22))
    return invalid_argument("shape needs B >= 1, 1 <= L <= 4M, 1 <= n <= 8");
  const auto B = int32_t(B64), L = int32_t(L64), n = int32_t(n64);
  DSA_ASSIGN_OR_RETURN(const int32_t sms, cuda::sm_count());
  const int32_t G = sms, W = (L + kPageSize - 1) / kPageSize, rows = B * n;
  const int64_t ld = (int64_t{W} * kPageSize + 255) / 256 * 256;
  const int64_t page_bytes = int64_t{kPageSize} * (kDim + 4);
  DSA_ASSIGN_OR_RETURN(const ClusterCapacity cap, paged_logits_topk_capacity(n, kHeads, W));
  const PagedLogitsTopkLaunch plan = paged_logits_topk_launch(n, kHeads, W, B, cap);

  const double touched = double(B) * W * page_bytes + double(rows) * kHeads * (kDim + 4) +
                         4.0 * B * W + 8.0 * rows * L;
  DSA_ASSIGN_OR_RETURN(const int copies, cuda::cold_copies(touched));
  // Scattered random pages and their page table, as paged_logits_bench builds them.
  SplitMix64 rng{42};
  DSA_ASSIGN_OR_RETURN(testing::ColdIndexerPool cold,
                       testing::make_cold_indexer_pool(rng, copies, B, W));
  const std::vector<int32_t>& table = cold.table;
  const int64_t pages = cold.pages;
  const int32_t table_rows = cold.table_rows;
  std::vector<int32_t> req_slot(size_t(copies) * B), row_page(size_t(copies) * rows);
  for (size_t i = 0; i < req_slot.size(); ++i) req_slot[i] = int32_t(i + 1);
  for (size_t r = 0; r < row_page.size(); ++r) row_page[r] = int32_t(r / size_t(n) + 1);
  std::vector<int32_t> row_len(static_cast<size_t>(rows));
  for (int32_t b = 0; b < B; ++b)
    for (int32_t j = 0; j < n; ++j) row_len[size_t(b * n + j)] = std::max(L - n + j + 1, 0);
  std::vector<uint8_t> q(size_t(copies) * rows * kHeads * kDim);
  testing::fill_bench_codes(rng, q.data(), q.size());
  std::vector<float> w(size_t(copies) * rows * kHeads);
  for (auto& v : w) v = float(int64_t(rng.next() % 2001) - 1000) * 1e-4f;
  std::vector<int32_t> schedule(size_t(logits_schedule_words(G)));
  LogitsScheduleParams sp{row_len.data(),          B, n, G, W, kPageSize, schedule.data(),
                          int32_t(schedule.size())};
  DSA_RETURN_IF_ERROR(build_logits_schedule_ref(sp));

  DSA_ASSIGN_OR_RETURN(auto d_table, upload(table));
  DSA_ASSIGN_OR_RETURN(auto d_slot, upload(req_slot));
  DSA_ASSIGN_OR_RETURN(auto d_row_page, upload(row_page));
  DSA_ASSIGN_OR_RETURN(auto d_len, upload(row_len));
  DSA_ASSIGN_OR_RETURN(auto d_q, upload(q));
  DSA_ASSIGN_OR_RETURN(auto d_w, upload(w));
  DSA_ASSIGN_OR_RETURN(auto d_sched, upload(schedule));
  DSA_ASSIGN_OR_RETURN(auto d_logits,
                       cuda::DeviceBuffer<float>::alloc(size_t(copies) * rows * size_t(ld)));
  DSA_ASSIGN_OR_RETURN(auto d_idx, cuda::DeviceBuffer<int32_t>::alloc(size_t(copies) * rows * kK));
  const PageTable pt{d_table.data(), table_rows, W, int32_t(pages)};

  std::vector<PagedLogitsParams> lp(static_cast<size_t>(copies));
  std::vector<TopkParams> tp(static_cast<size_t>(copies));
  std::vector<PagedLogitsTopkParams> fp(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    PagedLogitsParams& p = lp[size_t(c)];
    p.q = d_q.data() + size_t(c) * rows * kHeads * kDim;
    p.w = d_w.data() + size_t(c) * rows * kHeads;
    p.row_len = d_len.data();
    p.req_slot = d_slot.data() + c * B;
    p.page_table = pt;
    p.pool.data = cold.pool.data();
    p.pool.num_pages = int32_t(pages);
    p.schedule = d_sched.data();
    p.schedule_words = int32_t(schedule.size());
    p.batch_pad = B;
    p.rows_per_request = n;
    p.num_heads = kHeads;
    p.num_consumers = G;
    p.logits = d_logits.data() + size_t(c) * rows * size_t(ld);
    p.logits_ld = ld;
    p.logits_rows = rows;
    TopkParams& t = tp[size_t(c)];
    t.logits = p.logits;
    t.logits_ld = int32_t(ld);
    t.rows = rows;
    t.len = d_len.data();
    t.k = kK;
    t.variant = TopkVariant::kPaged;
    t.page_table = pt;
    t.row_page = d_row_page.data() + size_t(c) * rows;
    t.out_rows = rows;
    t.idx = d_idx.data() + size_t(c) * rows * kK;
    PagedLogitsTopkParams& f = fp[size_t(c)];
    f.q = p.q, f.w = p.w, f.row_len = p.row_len, f.req_slot = p.req_slot;
    f.page_table = pt;
    f.pool = p.pool;
    f.batch_pad = B;
    f.rows_per_request = n;
    f.num_heads = kHeads;
    f.k = kK;
    f.idx = t.idx;
  }
  cudaStream_t stream = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::set_current_stream(stream);
  {
    ScopedCheckedMode checked(true);  // one checked launch each: the data is in contract
    DSA_RETURN_IF_ERROR(paged_logits_cuda(lp[0]));
    DSA_RETURN_IF_ERROR(topk_cuda(tp[0]));
    if (plan.fits) DSA_RETURN_IF_ERROR(paged_logits_topk_cuda(fp[0]));
  }
  ScopedCheckedMode unchecked(false);
  auto time = [&](const std::function<Status(int)>& f) {
    return cuda::cold_median_us(f, copies, stream, iters);
  };
  DSA_ASSIGN_OR_RETURN(const cuda::ColdTiming pair, time([&](int c) {
                         DSA_RETURN_IF_ERROR(paged_logits_cuda(lp[size_t(c)]));
                         return topk_cuda(tp[size_t(c)]);
                       }));
  DSA_ASSIGN_OR_RETURN(const cuda::ColdTiming logits,
                       time([&](int c) { return paged_logits_cuda(lp[size_t(c)]); }));
  DSA_ASSIGN_OR_RETURN(const cuda::ColdTiming topk,
                       time([&](int c) { return topk_cuda(tp[size_t(c)]); }));
  cuda::ColdTiming fused{};
  if (plan.fits) {
    DSA_ASSIGN_OR_RETURN(fused, time([&](int c) { return paged_logits_topk_cuda(fp[size_t(c)]); }));
  }
  cuda::set_current_stream(nullptr);
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamDestroy(stream));

  const double bytes = double(B) * L * (kDim + 4) + double(rows) * kHeads * (kDim + 4) +
                       4.0 * B * W + 4.0 * rows * kK;
  const double flops = 2.0 * B * n * L * kHeads * kDim;
  const double roof_us = std::max(bytes / cuda::kH200Bandwidth, flops / cuda::kH200Fp8Flops) * 1e6;
  if (plan.fits) {
    std::printf(
        "bench=dsa_paged_logits_topk B=%d L=%d n=%d fused_us=%.1f pair_us=%.1f logits_us=%.1f "
        "topk_us=%.1f speedup=%.2f roof_us=%.2f roof_frac=%.3f cluster=%d chunk=%d stages=%d "
        "resident_clusters=%d copies=%d iters=%d\n",
        B, L, n, fused.median_us, pair.median_us, logits.median_us, topk.median_us,
        pair.median_us / fused.median_us, roof_us, roof_us / fused.median_us, plan.cluster,
        plan.chunk, plan.stages,
        cap[size_t(plan.cluster == 1   ? 0
                   : plan.cluster == 2 ? 1
                   : plan.cluster == 4 ? 2
                                       : 3)],
        copies, fused.iters);
  } else {
    std::printf(
        "bench=dsa_paged_logits_topk B=%d L=%d n=%d fused=does_not_fit pair_us=%.1f "
        "logits_us=%.1f topk_us=%.1f copies=%d\n",
        B, L, n, pair.median_us, logits.median_us, topk.median_us, copies);
  }
  std::fflush(stdout);
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<const char*> args(argv, argv + argc);
  const char* defaults[] = {"paged_logits_topk_bench", "--shape", "B=32,L=8K,n=1",   "--shape",
                            "B=32,L=32K,n=1",          "--shape", "B=32,L=64K,n=1",  "--shape",
                            "B=128,L=8K,n=1",          "--shape", "B=128,L=32K,n=1", "--shape",
                            "B=32,L=8K,n=4",           "--shape", "B=32,L=32K,n=4",  "--shape",
                            "B=128,L=8K,n=4",          "--shape", "B=128,L=32K,n=4", "--shape",
                            "B=32,L=64K,n=4"};
  if (argc == 1) args.assign(std::begin(defaults), std::end(defaults));
  StatusOr<cuda::PeerArgs> parsed =
      cuda::parse_peer_args(int(args.size()), const_cast<char**>(args.data()));
  if (!parsed.ok()) {
    std::fprintf(stderr, "paged_logits_topk_bench: %s\n", parsed.status().to_string().c_str());
    return 1;
  }
  int rc = 0;
  for (size_t i = 0; i < parsed->shapes.size(); ++i) {
    const Status st = run_shape(parsed->shapes[i], parsed->iters);
    if (!st.ok()) {
      std::fprintf(stderr, "paged_logits_topk_bench: shape %zu: %s\n", i, st.to_string().c_str());
      rc = 1;
    }
  }
  return rc;
}
