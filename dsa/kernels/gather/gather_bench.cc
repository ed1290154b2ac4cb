// Benchmark of the CUDA gathers (SPEC.md §3h) at EXTEND shapes: B requests of L keys each, pages
// shuffled over the pool. Bytes moved (read + written): indexer S (132 + 132); latent bf16
// S (1152 + 1152); latent FP8-656 S (656 + 1152); S = B L. Unchecked mode (no sync).
#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/gather/gather.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

void report(const char* what, int32_t batch, int32_t len, double us, double bytes) {
  const double tbps = bytes / (us * 1e-6) / 1e12;
  std::printf("%-22s B=%-3d L=%-6d  %9.2f us  %12.0f B  %6.3f TB/s  %5.1f%% of %.2f TB/s\n", what,
              batch, len, us, bytes, tbps, 100.0 * tbps * 1e12 / cuda::kH200Bandwidth,
              cuda::kH200Bandwidth / 1e12);
}

Status bench(int32_t batch, int32_t len) {
  testing::Rng rng(99);
  const int32_t width = (len + kPageSize - 1) / kPageSize;
  const int32_t num_pages = batch * width + 1;
  const int64_t rows = int64_t{batch} * len;
  std::vector<int32_t> pages = rng.permutation(1, num_pages);
  std::vector<int32_t> table(size_t(batch + 1) * width, 0), req_slot, cu_kv = {0};
  for (int32_t b = 0; b < batch; ++b) {
    std::copy_n(pages.begin() + int64_t{b} * width, width, table.begin() + int64_t{b + 1} * width);
    req_slot.push_back(b + 1);
    cu_kv.push_back(cu_kv.back() + len);
  }
  DSA_ASSIGN_OR_RETURN(auto dtable,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(table)));
  DSA_ASSIGN_OR_RETURN(auto dslot,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(req_slot)));
  DSA_ASSIGN_OR_RETURN(auto dcu,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(cu_kv)));
  const PageTable pt{dtable.data(), batch + 1, width, num_pages};
  cudaStream_t stream = cuda::current_stream();

  {
    DSA_ASSIGN_OR_RETURN(auto pool,
                         cuda::DeviceBuffer<uint8_t>::alloc(
                             size_t(num_pages) * indexer_page_bytes(kPageSize, kIndexHeadDim)));
    DSA_RETURN_IF_ERROR(pool.fill_bytes(0x11));
    DSA_ASSIGN_OR_RETURN(auto k8, cuda::DeviceBuffer<uint8_t>::alloc(size_t(rows) * kIndexHeadDim));
    DSA_ASSIGN_OR_RETURN(auto kscale, cuda::DeviceBuffer<float>::alloc(size_t(rows)));
    IndexerGatherParams p;
    p.req_slot = dslot.data();
    p.cu_kv = dcu.data();
    p.page_table = pt;
    p.pool.data = pool.data();
    p.pool.num_pages = num_pages;
    p.batch_pad = batch;
    p.k8 = k8.data();
    p.kscale = kscale.data();
    p.capacity = int32_t(rows);
    DSA_ASSIGN_OR_RETURN(double us,
                         cuda::median_us([&] { return indexer_gather_cuda(p); }, stream, 5, 50));
    report("indexer_gather", batch, len, us, double(rows) * 2 * (kIndexHeadDim + 4));
  }
  for (LatentFormat f : {LatentFormat::kFp8_656, LatentFormat::kBf16}) {
    const int32_t row_bytes = latent_bytes_per_token(f);
    DSA_ASSIGN_OR_RETURN(
        auto pool, cuda::DeviceBuffer<uint8_t>::alloc(size_t(num_pages) * kPageSize * row_bytes));
    DSA_RETURN_IF_ERROR(pool.fill_bytes(0x22));  // codes 0x22, scales 2.2e-18: finite
    DSA_ASSIGN_OR_RETURN(auto kv, cuda::DeviceBuffer<bf16>::alloc(size_t(rows) * kQkDim));
    LatentGatherParams p;
    p.req_slot = dslot.data();
    p.cu_kv = dcu.data();
    p.page_table = pt;
    p.pool.data = pool.data();
    p.pool.format = f;
    p.pool.num_pages = num_pages;
    p.batch_pad = batch;
    p.kv = kv.data();
    p.capacity = int32_t(rows);
    DSA_ASSIGN_OR_RETURN(double us,
                         cuda::median_us([&] { return latent_gather_cuda(p); }, stream, 5, 50));
    report(f == LatentFormat::kBf16 ? "latent_gather bf16" : "latent_gather FP8-656", batch, len,
           us, double(rows) * (row_bytes + kBf16LatentBytes));
  }
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  struct Shape {
    int32_t batch, len;
  };
  for (Shape s : {Shape{1, 8192}, Shape{1, 32768}, Shape{4, 16384}, Shape{2, 65536}}) {
    Status st = bench(s.batch, s.len);
    if (!st.ok()) {
      std::fprintf(stderr, "gather_bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}
