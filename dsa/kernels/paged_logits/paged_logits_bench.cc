// Benchmark of paged_logits_cuda at V3.2 shapes (H_i = 64, D_i = 128, P = 64): B in {32, 128},
// L in {8K, 32K, 64K}, n in {1, 2, 4}, verify-like lengths (row j of a request sees
// L - n + j + 1 tokens), scattered pages, G = one consumer per SM, unchecked mode (production).
// Per shape: median µs; key bytes B L (D_i + 4) (the §3b DRAM requirement's unit) and the §10
// minimum bytes, as TB/s and a fraction of 4.28 TB/s; FLOPs 2 B n L H_i D_i as TFLOP/s and a
// fraction of 1500; and the fraction of the §10 lower bound max(bytes / BW, FLOPs / peak).
//   usage: paged_logits_bench [iters]
//
// Peer mode (scripts/bench_vs_peers.sh), the anchors' shapes and timing method (cuda/bench_cold.h):
//   paged_logits_bench --shape B=128,L=32K,n=4 [--shape ...] [--iters N]
// One "bench=dsa_paged_logits B= L= n= us= ..." line per shape, with DeepGEMM's anchor layout of
// the problem: every row of a request sees row_len L - n + j + 1, pages scattered by a random
// permutation of the pool, cold L2 by disjoint copies of the pages, q, w and logits. The §3c
// schedule is built once per forward (DsaModel's first node) and read by every layer's launch, so
// it is off the per-layer critical path, as DeepGEMM's metadata is when callers reuse it: the
// line times the kernel alone and says so (schedule=per_forward). The build itself is timed by
// logits_schedule_bench; bench_vs_peers.sh adds it where a row compares "+ schedule launch".
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
#include "dsa/cuda/bench_cold.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/testing/cold_indexer_pool.h"

namespace {

using namespace dsa;           // NOLINT: a benchmark main
using namespace dsa::kernels;  // NOLINT

constexpr int32_t kHeads = 64, kDim = 128;

using SplitMix = SplitMix64;

template <class T>
StatusOr<cuda::DeviceBuffer<T>> upload(const std::vector<T>& v) {
  return cuda::DeviceBuffer<T>::from_host(std::span<const T>(v));
}

Status run(int iters) {
  cudaDeviceProp prop{};
  DSA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  const int32_t G = prop.multiProcessorCount;
  const int32_t max_b = 128, max_l = 65536, max_pages = max_b * (max_l / kPageSize) + 1;
  std::printf("paged_logits_cuda on %s, G = %d consumers, H_i = %d, D_i = %d, unchecked\n",
              prop.name, G, kHeads, kDim);

  // One pool for every shape: random keys, power-of-two scales; page 0 stays zero.
  SplitMix rng{42};
  std::vector<uint8_t> pool_host(size_t(max_pages) * kPageSize * (kDim + 4), 0);
  for (int32_t page = 1; page < max_pages; ++page) {
    uint8_t* base = pool_host.data() + size_t(page) * kPageSize * (kDim + 4);
    testing::fill_bench_codes(rng, base, size_t(kPageSize) * kDim);
    for (int32_t o = 0; o < kPageSize; ++o) {
      const float scale = 1.f / float(1 << (rng.next() % 8));
      std::memcpy(base + kPageSize * kDim + 4 * o, &scale, 4);
    }
  }
  DSA_ASSIGN_OR_RETURN(auto pool, upload(pool_host));
  pool_host = {};
  std::vector<int32_t> perm(size_t(max_pages - 1));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i + 1);
  for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % (i + 1)]);

  std::printf("%4s %6s %2s %10s %9s %9s %8s %6s %8s %6s %9s %6s %7s\n", "B", "L", "n", "us",
              "key_MB", "total_MB", "key_TB/s", "frac", "tot_TB/s", "frac", "TFLOP/s", "frac",
              "bound%");
  for (int32_t B : {32, 128}) {
    for (int32_t L : {8192, 32768, 65536}) {
      for (int32_t n : {1, 2, 4}) {
        const int32_t W = L / kPageSize, rows = B * n;
        std::vector<int32_t> table(size_t(B + 1) * W, 0);
        std::vector<int32_t> req_slot(static_cast<size_t>(B));
        std::vector<int32_t> row_len(static_cast<size_t>(rows));
        for (int32_t b = 0; b < B; ++b) {
          req_slot[size_t(b)] = b + 1;
          for (int32_t i = 0; i < W; ++i) table[size_t(b + 1) * W + i] = perm[size_t(b) * W + i];
          for (int32_t j = 0; j < n; ++j) row_len[size_t(b * n + j)] = L - n + j + 1;
        }
        std::vector<uint8_t> q(size_t(rows) * kHeads * kDim);
        testing::fill_bench_codes(rng, q.data(), q.size());
        std::vector<float> w(size_t(rows) * kHeads);
        for (auto& v : w) v = float(int64_t(rng.next() % 2001) - 1000) * 1e-4f;
        std::vector<int32_t> schedule(size_t(logits_schedule_words(G)));
        LogitsScheduleParams sp{row_len.data(),          B, n, G, W, kPageSize, schedule.data(),
                                int32_t(schedule.size())};
        DSA_RETURN_IF_ERROR(build_logits_schedule_ref(sp));

        DSA_ASSIGN_OR_RETURN(auto d_table, upload(table));
        DSA_ASSIGN_OR_RETURN(auto d_slot, upload(req_slot));
        DSA_ASSIGN_OR_RETURN(auto d_len, upload(row_len));
        DSA_ASSIGN_OR_RETURN(auto d_q, upload(q));
        DSA_ASSIGN_OR_RETURN(auto d_w, upload(w));
        DSA_ASSIGN_OR_RETURN(auto d_sched, upload(schedule));
        const int64_t ld = L;  // a multiple of 256 and W P
        DSA_ASSIGN_OR_RETURN(auto d_logits, cuda::DeviceBuffer<float>::alloc(size_t(rows) * ld));

        PagedLogitsParams p;
        p.q = d_q.data();
        p.w = d_w.data();
        p.row_len = d_len.data();
        p.req_slot = d_slot.data();
        p.page_table = PageTable{d_table.data(), B + 1, W, max_pages};
        p.pool.data = pool.data();
        p.pool.num_pages = max_pages;
        p.schedule = d_sched.data();
        p.schedule_words = int32_t(schedule.size());
        p.batch_pad = B;
        p.rows_per_request = n;
        p.num_heads = kHeads;
        p.num_consumers = G;
        p.logits = d_logits.data();
        p.logits_ld = ld;
        p.logits_rows = rows;
        {
          ScopedCheckedMode checked(true);  // one checked launch: the data is in contract
          DSA_RETURN_IF_ERROR(paged_logits_cuda(p));
        }
        ScopedCheckedMode unchecked(false);
        DSA_ASSIGN_OR_RETURN(double us, cuda::median_us([&] { return paged_logits_cuda(p); },
                                                        cuda::current_stream(), 3, iters));
        const double key_bytes = double(B) * L * (kDim + 4);
        const double total_bytes = key_bytes + 4.0 * B * n * L +
                                   double(B) * n * kHeads * (kDim + 4) +
                                   4.0 * B * ((L + kPageSize - 1) / kPageSize);
        const double flops = 2.0 * B * n * L * kHeads * kDim;
        const double s = us * 1e-6;
        const double bound_s =
            std::max(total_bytes / cuda::kH200Bandwidth, flops / cuda::kH200Fp8Flops);
        std::printf("%4d %6d %2d %10.1f %9.1f %9.1f %8.3f %6.3f %8.3f %6.3f %9.1f %6.3f %6.1f%%\n",
                    B, L, n, us, key_bytes / 1e6, total_bytes / 1e6, key_bytes / s / 1e12,
                    key_bytes / s / cuda::kH200Bandwidth, total_bytes / s / 1e12,
                    total_bytes / s / cuda::kH200Bandwidth, flops / s / 1e12,
                    flops / s / cuda::kH200Fp8Flops, 100.0 * bound_s / s);
        std::fflush(stdout);
      }
    }
  }
  return ok_status();
}

// Peer mode: one shape, the anchors' method. Device memory is sized per shape: copies x B x W
// pages (+ page 0, reserved and zero), and copies of q, w and the logits.
Status run_peer_shape(const cuda::ShapeArg& shape, int iters) {
  DSA_ASSIGN_OR_RETURN(const int64_t B64, cuda::shape_value(shape, "B"));
  DSA_ASSIGN_OR_RETURN(const int64_t L64, cuda::shape_value(shape, "L"));
  DSA_ASSIGN_OR_RETURN(const int64_t n64, cuda::shape_value(shape, "n", 1));
  if (B64 < 1 || L64 < 1 || n64 < 1 || n64 > 8 || L64 > (int64_t{1} << 24))
    return invalid_argument("paged_logits peer shape needs B >= 1, 1 <= L <= 16M, 1 <= n <= 8");
  const auto B = int32_t(B64), L = int32_t(L64), n = int32_t(n64);
  cudaDeviceProp prop{};
  DSA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0));
  const int32_t G = prop.multiProcessorCount;
  const int32_t W = (L + kPageSize - 1) / kPageSize, rows = B * n;
  const int64_t ld = (int64_t{W} * kPageSize + 255) / 256 * 256;
  const int64_t page_bytes = int64_t{kPageSize} * (kDim + 4);

  // What one call touches: the request's pages (keys and scales), q, w, the page-table rows, and
  // the logits it writes. That sizes the copies; the §10 minimum below is the roofline's.
  const double touched = double(B) * W * page_bytes + double(rows) * kHeads * (kDim + 4) +
                         4.0 * B * W + 4.0 * rows * L;
  DSA_ASSIGN_OR_RETURN(const int copies, cuda::cold_copies(touched));
  // Scattered random pages and their page table (testing/cold_indexer_pool.h).
  SplitMix rng{42};
  DSA_ASSIGN_OR_RETURN(testing::ColdIndexerPool cold,
                       testing::make_cold_indexer_pool(rng, copies, B, W));
  cuda::DeviceBuffer<uint8_t>& pool = cold.pool;
  const std::vector<int32_t>& table = cold.table;
  const int64_t pages = cold.pages;
  const int32_t table_rows = cold.table_rows;
  std::vector<int32_t> req_slot(size_t(copies) * B);
  for (size_t i = 0; i < req_slot.size(); ++i) req_slot[i] = int32_t(i + 1);
  std::vector<int32_t> row_len(static_cast<size_t>(rows));
  for (int32_t b = 0; b < B; ++b)
    for (int32_t j = 0; j < n; ++j) row_len[size_t(b * n + j)] = L - n + j + 1;
  std::vector<uint8_t> q(size_t(rows) * kHeads * kDim);
  testing::fill_bench_codes(rng, q.data(), q.size());
  std::vector<float> w(size_t(rows) * kHeads);
  for (auto& v : w) v = float(int64_t(rng.next() % 2001) - 1000) * 1e-4f;

  DSA_ASSIGN_OR_RETURN(auto d_table, upload(table));
  DSA_ASSIGN_OR_RETURN(auto d_slot, upload(req_slot));
  DSA_ASSIGN_OR_RETURN(auto d_len, upload(row_len));
  DSA_ASSIGN_OR_RETURN(auto d_q, cuda::DeviceBuffer<uint8_t>::alloc(q.size() * copies));
  DSA_ASSIGN_OR_RETURN(auto d_w, cuda::DeviceBuffer<float>::alloc(w.size() * copies));
  for (int c = 0; c < copies; ++c) {
    DSA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(d_q.data() + c * q.size(), q.data(), q.size(), cudaMemcpyHostToDevice));
    DSA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(d_w.data() + c * w.size(), w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  }
  DSA_ASSIGN_OR_RETURN(auto d_logits,
                       cuda::DeviceBuffer<float>::alloc(size_t(copies) * rows * size_t(ld)));
  // The schedule from the same row_len, built by the reference (bit-identical to the device
  // builder) and shared by every copy, as every layer of a forward shares it.
  std::vector<int32_t> schedule(size_t(logits_schedule_words(G)));
  LogitsScheduleParams sp{row_len.data(),          B, n, G, W, kPageSize, schedule.data(),
                          int32_t(schedule.size())};
  DSA_RETURN_IF_ERROR(build_logits_schedule_ref(sp));
  DSA_ASSIGN_OR_RETURN(auto d_sched, upload(schedule));
  const int32_t words = int32_t(schedule.size());

  std::vector<PagedLogitsParams> params(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    PagedLogitsParams& p = params[size_t(c)];
    p.q = d_q.data() + c * q.size();
    p.w = d_w.data() + c * w.size();
    p.row_len = d_len.data();
    p.req_slot = d_slot.data() + c * B;
    p.page_table = PageTable{d_table.data(), table_rows, W, int32_t(pages)};
    p.pool.data = pool.data();
    p.pool.num_pages = int32_t(pages);
    p.schedule = d_sched.data();
    p.schedule_words = words;
    p.batch_pad = B;
    p.rows_per_request = n;
    p.num_heads = kHeads;
    p.num_consumers = G;
    p.logits = d_logits.data() + size_t(c) * rows * size_t(ld);
    p.logits_ld = ld;
    p.logits_rows = rows;
  }
  cudaStream_t stream = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::set_current_stream(stream);
  {
    ScopedCheckedMode checked(true);  // one checked launch per copy: the data is in contract
    for (const PagedLogitsParams& p : params) DSA_RETURN_IF_ERROR(paged_logits_cuda(p));
  }
  ScopedCheckedMode unchecked(false);
  DSA_ASSIGN_OR_RETURN(
      const cuda::ColdTiming kernel,
      cuda::cold_median_us([&](int c) { return paged_logits_cuda(params[size_t(c)]); }, copies,
                           stream, iters));
  cuda::set_current_stream(nullptr);
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamDestroy(stream));

  // §10: B L (D_i + 4) + 4 B n L + B n H_i (D_i + 4) + 4 B ceil(L / P); 2 B n L H_i D_i.
  const double key_bytes = double(B) * L * (kDim + 4);
  const double bytes =
      key_bytes + 4.0 * B * n * L + double(B) * n * kHeads * (kDim + 4) + 4.0 * B * W;
  const double flops = 2.0 * B * n * L * kHeads * kDim;
  char shape_text[96], extra[160];
  std::snprintf(shape_text, sizeof shape_text, "B=%d L=%d n=%d", B, L, n);
  std::snprintf(extra, sizeof extra, "key_GBps=%.0f tflops=%.1f G=%d schedule=excluded_per_forward",
                key_bytes / (kernel.median_us * 1e3), flops / (kernel.median_us * 1e6), G);
  cuda::print_cold_line("dsa_paged_logits", shape_text, kernel, bytes, flops, cuda::kH200Fp8Flops,
                        extra);
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  // A bare number (or nothing) is the legacy table; flags are the peer mode.
  if (argc > 1 && argv[1][0] == '-') {
    StatusOr<cuda::PeerArgs> args = cuda::parse_peer_args(argc, argv);
    if (!args.ok()) {
      std::fprintf(stderr, "paged_logits_bench: %s\n", args.status().to_string().c_str());
      return 1;
    }
    if (args->shapes.empty()) {
      std::fprintf(stderr, "paged_logits_bench: peer mode needs --shape\n");
      return 1;
    }
    // A failing shape is reported and the others still run: one device call measures them all.
    int rc = 0;
    for (size_t i = 0; i < args->shapes.size(); ++i) {
      const Status st = run_peer_shape(args->shapes[i], args->iters);
      if (!st.ok()) {
        std::fprintf(stderr, "paged_logits_bench: shape %zu: %s\n", i, st.to_string().c_str());
        rc = 1;
      }
    }
    return rc;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 30;
  const Status st = run(iters);
  if (!st.ok()) {
    std::fprintf(stderr, "paged_logits_bench: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
