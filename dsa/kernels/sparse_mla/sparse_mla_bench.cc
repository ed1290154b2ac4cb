// Benchmark of sparse_mla_decode_cuda at V3.2 shapes (H 128, K 2048, FP8-656 cache; B in {32, 128},
// n in {1, 4}, so R = B n in {32, 128, 512}), plus the bf16 cache and bf16 prefill for reference.
// Each request owns a context of L = 8192 tokens on random pages; its n rows each select K
// distinct positions of it. One line per shape: median µs over 50 runs (CUDA events), FLOPs
// 2 R H K 1088 as TFLOP/s and the fraction of 805 (bf16 MMA), bytes per SPEC §10 as TB/s and the
// fraction of 4.28. Runs in unchecked mode (checked mode synchronises after every launch).
//   usage: sparse_mla_bench
//
// Peer mode (scripts/bench_vs_peers.sh), FlashMLA anchor's problem and timing method
// (cuda/bench_cold.h): FP8-656 cache, H 128, K 2048, b requests of s_q query rows each (R = b s_q),
// each request owning a context of 32768 tokens whose pages sit at random places in the pool, each
// row selecting K distinct random tokens of it:
//   sparse_mla_bench --shape b=128,s_q=1 [--shape ...] [--iters N]
// One "bench=dsa_sparse_mla_decode b= s_q= us= ..." line per shape; the time includes the
// split-KV combine where the launcher splits (as FlashMLA's includes its combine).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_cold.h"
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
std::vector<uint8_t> make_pool(LatentFormat f, std::mt19937_64& gen,
                               int32_t num_pages = kNumPages) {
  const size_t row = latent_bytes_per_token(f);
  std::vector<uint8_t> bytes(size_t(num_pages) * kPageSize * row, 0);
  for (size_t s = kPageSize; s < size_t(num_pages) * kPageSize; ++s) {
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

// Peer mode, one shape: copies x b requests of ctx tokens on pages scattered over one pool, and
// copies of q, indices, out and lse; the split workspace is shared, as a caller reuses it across
// layers. Pool bytes come from a host template of 512 pages repeated on the device
// (values repeat across copies; addresses, which is what L2 sees, do not).
Status run_peer_shape(const cuda::ShapeArg& shape, int iters, std::mt19937_64& gen) {
  DSA_ASSIGN_OR_RETURN(const int64_t b64, cuda::shape_value(shape, "b"));
  DSA_ASSIGN_OR_RETURN(const int64_t sq64, cuda::shape_value(shape, "s_q", 1));
  DSA_ASSIGN_OR_RETURN(const int64_t ctx64, cuda::shape_value(shape, "ctx", 32768));
  if (b64 < 1 || sq64 < 1 || b64 * sq64 > 65535 || ctx64 < kTopk || ctx64 % kPageSize != 0 ||
      ctx64 > (int64_t{1} << 22))
    return invalid_argument("sparse_mla peer shape needs b, s_q >= 1, ctx a multiple of 64 >= K");
  const auto b = int32_t(b64), s_q = int32_t(sq64), ctx = int32_t(ctx64);
  const int32_t rows = b * s_q, ppr = ctx / kPageSize;
  constexpr LatentFormat kFormat = LatentFormat::kFp8_656;
  const int64_t token_bytes = latent_bytes_per_token(kFormat);
  const int64_t page_bytes = int64_t{kPageSize} * token_bytes;
  // §10: R min(K, L) c + 2 R H (576 + 512) + 4 R (H + K); 2 R H K 1088.
  const double bytes = double(rows) * kTopk * token_bytes + 2.0 * rows * kHeads * (576 + 512) +
                       4.0 * rows * (kHeads + kTopk);
  const double flops = 2.0 * rows * kHeads * kTopk * 1088;
  DSA_ASSIGN_OR_RETURN(const int copies, cuda::cold_copies(bytes));
  const int64_t pages = int64_t{copies} * b * ppr + 1;
  if (pages * kPageSize > INT32_MAX) return invalid_argument("sparse_mla peer shape too large");

  const int64_t tmpl_pages = std::min<int64_t>(512, pages - 1);
  std::vector<uint8_t> tmpl = make_pool(kFormat, gen, int32_t(tmpl_pages + 1));  // page 0 zero
  auto pool = must(cuda::DeviceBuffer<uint8_t>::alloc(size_t(pages * page_bytes)));
  DSA_CUDA_RETURN_IF_ERROR(cudaMemset(pool.data(), 0, size_t(page_bytes)));
  DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy(pool.data() + page_bytes, tmpl.data() + page_bytes,
                                      size_t(tmpl_pages * page_bytes), cudaMemcpyHostToDevice));
  DSA_RETURN_IF_ERROR(cuda::fill_pool_by_doubling(pool.data(), pages, page_bytes, tmpl_pages));
  tmpl = {};

  // Request (c, r) owns pages perm[(c b + r) ppr + i], i < ppr: scattered over the whole pool.
  std::vector<int32_t> perm(size_t(pages - 1));
  std::iota(perm.begin(), perm.end(), 1);
  std::shuffle(perm.begin(), perm.end(), gen);
  const size_t per_copy = size_t(rows) * kTopk;
  std::vector<int32_t> indices(per_copy * size_t(copies));
  std::vector<int32_t> pos(static_cast<size_t>(ctx));
  for (int c = 0; c < copies; ++c) {
    for (int32_t r = 0; r < b; ++r) {
      const int32_t* req_pages = perm.data() + (size_t(c) * b + size_t(r)) * size_t(ppr);
      for (int32_t j = 0; j < s_q; ++j) {
        int32_t* out = indices.data() + size_t(c) * per_copy + (size_t(r) * s_q + j) * kTopk;
        std::iota(pos.begin(), pos.end(), 0);
        for (int32_t i = 0; i < kTopk; ++i) {  // partial Fisher-Yates: K distinct positions
          std::swap(pos[size_t(i)], pos[size_t(i) + gen() % size_t(ctx - i)]);
          const int32_t t = pos[size_t(i)];
          out[i] = req_pages[t / kPageSize] * kPageSize + t % kPageSize;
        }
      }
    }
  }
  perm = {};
  auto d_idx = must(cuda::DeviceBuffer<int32_t>::from_host(indices));
  indices = {};
  const size_t q_elems = size_t(rows) * kHeads * kQkDim;
  auto q = must(cuda::DeviceBuffer<bf16>::alloc(q_elems * copies));
  {
    std::vector<bf16> hq(q_elems);
    for (auto& v : hq) v = float_to_bf16(float(int(gen() % 256) - 128) / 256.f);
    for (int c = 0; c < copies; ++c)
      DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy(q.data() + size_t(c) * q_elems, hq.data(),
                                          q_elems * sizeof(bf16), cudaMemcpyHostToDevice));
  }
  const size_t out_elems = size_t(rows) * kHeads * kVDim, lse_elems = size_t(rows) * kHeads;
  auto out = must(cuda::DeviceBuffer<bf16>::alloc(out_elems * copies));
  auto lse = must(cuda::DeviceBuffer<float>::alloc(lse_elems * copies));
  // Enough workspace for the launcher's own choice: it splits only while R ceil(H / 64) < SMs,
  // into at most SMs / (R ceil(H / 64)) splits.
  const int64_t ctas = int64_t{rows} * ((kHeads + 63) / 64);
  const int64_t max_splits =
      ctas < cuda::kH200Sms ? std::min<int64_t>(cuda::kH200Sms / ctas, 64) : 1;
  const int64_t ws_floats =
      sparse_mla_decode_workspace_floats(rows, kHeads, int32_t(std::max<int64_t>(max_splits, 1)));
  auto ws = must(cuda::DeviceBuffer<float>::alloc(size_t(ws_floats)));

  cudaStream_t stream = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::set_current_stream(stream);
  SparseMlaDecodeParams p;
  p.cache = LatentPool{pool.data(), kFormat, int32_t(pages), kPageSize};
  p.rows = rows, p.num_heads = kHeads, p.topk = kTopk, p.sm_scale = kV32SmScale;
  p.split_workspace = ws.data(), p.split_workspace_floats = ws_floats;
  p.num_splits = 0;  // the launcher's choice, as production runs it
  auto launch = [&](int c) {
    SparseMlaDecodeParams r = p;
    r.q = q.data() + size_t(c) * q_elems;
    r.indices = d_idx.data() + size_t(c) * per_copy;
    r.out = out.data() + size_t(c) * out_elems;
    r.lse = lse.data() + size_t(c) * lse_elems;
    return sparse_mla_decode_cuda(r);
  };
  {
    ScopedCheckedMode checked(true);  // one checked call per copy: the indices are in contract
    for (int c = 0; c < copies; ++c) DSA_RETURN_IF_ERROR(launch(c));
  }
  DSA_ASSIGN_OR_RETURN(const cuda::ColdTiming t,
                       cuda::cold_median_us(launch, copies, stream, iters));
  cuda::set_current_stream(nullptr);
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamDestroy(stream));

  char shape_text[96], extra[160];
  std::snprintf(shape_text, sizeof shape_text, "b=%d s_q=%d h_q=%d topk=%d", b, s_q, kHeads, kTopk);
  std::snprintf(extra, sizeof extra, "tflops=%.1f kv_GBps=%.0f ctx=%d cache=fp8_656 splits=auto",
                flops / (t.median_us * 1e6),
                double(rows) * kTopk * token_bytes / (t.median_us * 1e3), ctx);
  cuda::print_cold_line("dsa_sparse_mla_decode", shape_text, t, bytes, flops, cuda::kH200Bf16Flops,
                        extra);
  return ok_status();
}

}  // namespace
}  // namespace dsa::kernels

int main(int argc, char** argv) {
  if (argc > 1) {
    dsa::set_checked_mode(false);
    std::mt19937_64 gen(20240601);
    dsa::StatusOr<dsa::cuda::PeerArgs> args = dsa::cuda::parse_peer_args(argc, argv);
    if (!args.ok()) {
      std::fprintf(stderr, "sparse_mla_bench: %s\n", args.status().to_string().c_str());
      return 1;
    }
    if (args->shapes.empty()) {
      std::fprintf(stderr, "sparse_mla_bench: peer mode needs --shape\n");
      return 1;
    }
    // A failing shape is reported and the others still run: one device call measures them all.
    int rc = 0;
    for (size_t i = 0; i < args->shapes.size(); ++i) {
      const dsa::Status st = dsa::kernels::run_peer_shape(args->shapes[i], args->iters, gen);
      if (!st.ok()) {
        std::fprintf(stderr, "sparse_mla_bench: shape %zu: %s\n", i, st.to_string().c_str());
        rc = 1;
      }
    }
    return rc;
  }
  dsa::kernels::run();
  return 0;
}
