// Benchmark of latent_write_cuda at V3.2 shapes (576-value rows, P = 64), T in {128, 4096} new
// tokens scattered to shuffled slots of a large pool, both cache formats. Bytes: T (1152 + c),
// c = 656 (FP8-656) or 1152 (bf16): the bf16 rows read plus the cache rows written. Unchecked
// mode (the production setting: no sync after the launch).
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/latent_write/latent_write.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

Status bench(int32_t tokens, LatentFormat format) {
  testing::Rng rng(1234);
  const int32_t num_pages = 8192;  // 344 MB (FP8-656) / 604 MB (bf16)
  std::vector<bf16> kv = rng.bf16_vector(size_t(tokens) * kQkDim, 2.f);
  std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
  std::vector<int32_t> slot(perm.begin(), perm.begin() + tokens);
  DSA_ASSIGN_OR_RETURN(auto dkv, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(kv)));
  DSA_ASSIGN_OR_RETURN(auto dslot,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(slot)));
  const int32_t row = latent_bytes_per_token(format);
  DSA_ASSIGN_OR_RETURN(auto dpool,
                       cuda::DeviceBuffer<uint8_t>::alloc(size_t(num_pages) * kPageSize * row));
  DSA_RETURN_IF_ERROR(dpool.fill_bytes(0));
  LatentWriteParams p;
  p.kv = dkv.data();
  p.slot = dslot.data();
  p.num_tokens = tokens;
  p.pool.data = dpool.data();
  p.pool.format = format;
  p.pool.num_pages = num_pages;
  DSA_ASSIGN_OR_RETURN(double us, cuda::median_us([&] { return latent_write_cuda(p); },
                                                  cuda::current_stream(), 10, 200));
  const double bytes = double(tokens) * (kBf16LatentBytes + row);
  const double tbps = bytes / (us * 1e-6) / 1e12;
  std::printf("latent_write %-7s T=%-5d  %8.2f us  %10.0f B  %6.3f TB/s  %5.1f%% of %.2f TB/s\n",
              format == LatentFormat::kBf16 ? "bf16" : "FP8-656", tokens, us, bytes, tbps,
              100.0 * tbps * 1e12 / cuda::kH200Bandwidth, cuda::kH200Bandwidth / 1e12);
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  for (LatentFormat f : {LatentFormat::kFp8_656, LatentFormat::kBf16}) {
    for (int32_t tokens : {128, 4096}) {
      Status st = bench(tokens, f);
      if (!st.ok()) {
        std::fprintf(stderr, "latent_write_bench: %s\n", st.to_string().c_str());
        return 1;
      }
    }
  }
  return 0;
}
