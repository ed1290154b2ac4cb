// Benchmark of sparse_mla_decode_cuda at V3.2 shapes (H 128, K 2048, FP8-656 cache; B in {32, 128},
// n in {1, 4}, so R = B n in {32, 128, 512}), plus the bf16 cache and bf16 prefill for reference.
// Each request owns a context of L = 8192 tokens on random pages; its n rows each select K
// distinct positions of it. One line per shape: median µs over 50 runs (CUDA events), FLOPs
// 2 R H K 1088 as TFLOP/s and the fraction of 805 (bf16 MMA), bytes per SPEC §10 as TB/s and the
// fraction of 4.28. Runs in unchecked mode (checked mode synchronises after every launch).
//   usage: sparse_mla_bench
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"

namespace dsa::kernels {
namespace {

constexpr int32_t kHeads = 128, kTopk = 2048, kContext = 8192;
constexpr int32_t kPagesPerRequest = kContext / kPageSize;
constexpr int32_t kMaxRequests = 128;
constexpr int32_t kNumPages = 1 + kMaxRequests * kPagesPerRequest;  // page 0 reserved

#define BENCH_CHECK(expr)                                                     \
  do {                                                                        \
    Status s_ = (expr);                                                       \
    if (!s_.ok()) {                                                           \
      std::fprintf(stderr, "%s failed: %s\n", #expr, s_.to_string().c_str()); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

template <typename T>
cuda::DeviceBuffer<T> must(StatusOr<cuda::DeviceBuffer<T>> b) {
  BENCH_CHECK(b.status());
  return std::move(b).value();
}

// Random pool bytes: finite e4m3 codes (|code| <= 0x77, never NaN), power-of-two scales, bf16
// k_pe; for the bf16 format, bf16 values in [-2, 2]. Page 0 stays zero.
std::vector<uint8_t> make_pool(LatentFormat f, std::mt19937_64& gen) {
  const size_t row = latent_bytes_per_token(f);
  std::vector<uint8_t> bytes(size_t(kNumPages) * kPageSize * row, 0);
  for (size_t s = kPageSize; s < size_t(kNumPages) * kPageSize; ++s) {
    uint8_t* p = bytes.data() + s * row;
    uint64_t x = gen();
    auto next = [&] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return x;
    };
    if (f == LatentFormat::kFp8_656) {
      for (int t = 0; t < kLatentDim; ++t) p[t] = uint8_t(next()) & 0xF7;
      for (int t = 0; t < 4; ++t) {
        const float scale = 1.f / float(1 << (next() % 4));
        std::memcpy(p + kLatentDim + 4 * t, &scale, 4);
      }
      for (int t = 0; t < kRopeDim; ++t) {
        const bf16 v = float_to_bf16(float(int(next() % 256) - 128) / 64.f);
        std::memcpy(p + kLatentDim + 16 + 2 * t, &v, 2);
      }
    } else {
      for (int t = 0; t < kQkDim; ++t) {
        const bf16 v = float_to_bf16(float(int(next() % 256) - 128) / 64.f);
        std::memcpy(p + 2 * t, &v, 2);
      }
    }
  }
  return bytes;
}

// [R, K] slots: request b = r / n owns pages [1 + b * 128, 1 + (b + 1) * 128) in shuffled
// order; each row picks K distinct positions of its request's context.
std::vector<int32_t> make_indices(int32_t requests, int32_t n, std::mt19937_64& gen) {
  std::vector<int32_t> out;
  out.reserve(size_t(requests) * n * kTopk);
  std::vector<int32_t> pos(kContext), pages(kPagesPerRequest);
  for (int32_t b = 0; b < requests; ++b) {
    std::iota(pages.begin(), pages.end(), 1 + b * kPagesPerRequest);
    std::shuffle(pages.begin(), pages.end(), gen);
    for (int32_t j = 0; j < n; ++j) {
      std::iota(pos.begin(), pos.end(), 0);
      for (int32_t i = 0; i < kTopk; ++i) {  // partial Fisher-Yates
        std::swap(pos[i], pos[i + gen() % (kContext - i)]);
        out.push_back(pages[pos[i] / kPageSize] * kPageSize + pos[i] % kPageSize);
      }
    }
  }
  return out;
}

void print_line(const char* op, const char* fmt_name, int32_t b, int32_t n, const char* path,
                double us, double cache_bytes_per_token) {
  const double rows = double(b) * n;
  const double flops = 2.0 * rows * kHeads * kTopk * 1088;
  const double bytes = rows * kTopk * cache_bytes_per_token + 2.0 * rows * kHeads * (576 + 512) +
                       4.0 * rows * (kHeads + kTopk);
  const double tflops = flops / (us * 1e-6) / 1e12;
  const double tbs = bytes / (us * 1e-6) / 1e12;
  std::printf(
      "%s %-6s B=%-3d n=%d R=%-3d H=%d K=%d %-8s %9.1f us  %7.1f GFLOP %6.1f TFLOP/s (%4.1f%% of "
      "805)  %7.1f MB %5.2f TB/s (%4.1f%% of 4.28)\n",
      op, fmt_name, b, n, int(rows), kHeads, kTopk, path, us, flops / 1e9, tflops,
      100.0 * tflops * 1e12 / cuda::kH200Bf16Flops, bytes / 1e6, tbs,
      100.0 * tbs * 1e12 / cuda::kH200Bandwidth);
}

void run() {
  set_checked_mode(false);
  std::mt19937_64 gen(20240601);
  const cudaStream_t stream = cuda::current_stream();
  struct Shape {
    int32_t b, n;
  };
  const Shape shapes[] = {{32, 1}, {32, 4}, {128, 1}, {128, 4}};
  std::vector<std::vector<int32_t>> indices;
  for (const Shape& s : shapes) indices.push_back(make_indices(s.b, s.n, gen));
  const int32_t max_rows = 512;
  auto q = must(cuda::DeviceBuffer<bf16>::alloc(size_t(max_rows) * kHeads * kQkDim));
  {
    std::vector<bf16> hq(q.size());
    for (auto& v : hq) v = float_to_bf16(float(int(gen() % 256) - 128) / 256.f);
    BENCH_CHECK(q.upload(hq));
  }
  auto out = must(cuda::DeviceBuffer<bf16>::alloc(size_t(max_rows) * kHeads * kVDim));
  auto lse = must(cuda::DeviceBuffer<float>::alloc(size_t(max_rows) * kHeads));
  const int64_t ws_floats = sparse_mla_decode_workspace_floats(32, kHeads, 8);
  auto ws = must(cuda::DeviceBuffer<float>::alloc(size_t(ws_floats)));

  for (LatentFormat f : {LatentFormat::kFp8_656, LatentFormat::kBf16}) {
    const char* fname = f == LatentFormat::kFp8_656 ? "fp8" : "bf16";
    auto pool = must(cuda::DeviceBuffer<uint8_t>::from_host(make_pool(f, gen)));
    for (size_t i = 0; i < std::size(shapes); ++i) {
      const Shape& s = shapes[i];
      auto idx = must(cuda::DeviceBuffer<int32_t>::from_host(indices[i]));
      SparseMlaDecodeParams p;
      p.q = q.data(), p.cache = LatentPool{pool.data(), f, kNumPages, kPageSize};
      p.indices = idx.data(), p.rows = s.b * s.n, p.num_heads = kHeads, p.topk = kTopk;
      p.sm_scale = kV32SmScale, p.out = out.data(), p.lse = lse.data();
      p.split_workspace = ws.data(), p.split_workspace_floats = ws_floats;
      for (int32_t splits : {0, 1}) {
        if (splits == 1 && p.rows * 2 >= cuda::kH200Sms) continue;  // auto never splits there
        p.num_splits = splits;
        auto us = cuda::median_us([&] { return sparse_mla_decode_cuda(p); }, stream);
        BENCH_CHECK(us.status());
        print_line("sparse_mla_decode ", fname, s.b, s.n, splits == 0 ? "auto" : "nosplit",
                   us.value(), latent_bytes_per_token(f));
      }
      if (f == LatentFormat::kBf16 && s.b * s.n == 512) {
        // Prefill over the same bf16 pool viewed flat (source 1), 512 tokens.
        SparseMlaPrefillParams pp;
        pp.q = q.data(), pp.kv = reinterpret_cast<const bf16*>(pool.data());
        pp.num_kv = kNumPages * kPageSize, pp.kv_source = SparseMlaKvSource::kFlatPool;
        pp.indices = idx.data(), pp.tokens = 512, pp.num_heads = kHeads, pp.topk = kTopk;
        pp.sm_scale = kV32SmScale, pp.out = out.data(), pp.lse = lse.data();
        auto us = cuda::median_us([&] { return sparse_mla_prefill_cuda(pp); }, stream);
        BENCH_CHECK(us.status());
        print_line("sparse_mla_prefill", fname, s.b, s.n, "T=512", us.value(),
                   latent_bytes_per_token(f));
      }
    }
  }
}

}  // namespace
}  // namespace dsa::kernels

int main() {
  dsa::kernels::run();
  return 0;
}
