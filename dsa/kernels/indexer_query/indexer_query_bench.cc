// Benchmark of indexer_query_cuda against the unfused sequence it replaces (the 2-D copy of the
// heads out of the fused q_b + wq_b output, rope_cuda, hadamard_cuda, indexer_q_quant_cuda) at
// V3.2 shapes: H_i = 64 index heads behind q_b's 128 x 192 columns (rows of 32768 bf16),
// T in {1, 4, 32, 512}. Memory-bound: bytes = T H_i (2 D_i + D_i + 8) (the bf16 heads read, the
// e4m3 codes written, each fp32 weight read and written). Unchecked mode (no sync).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/bench_timer.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/indexer_query/indexer_query.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/testing/random.h"

namespace {

using namespace dsa;
using namespace dsa::kernels;

constexpr int32_t kHeads = 64;                    // V3.2 index_n_heads
constexpr int64_t kQbColumns = 128 * 192;         // q_b's output before the indexer's heads
constexpr int64_t kRow = kHeads * kIndexHeadDim;  // the indexer's heads of one token
constexpr int64_t kLd = kQbColumns + kRow;
constexpr int32_t kPositions = 4096;

Status bench(int32_t tokens) {
  testing::Rng rng(5);
  const int64_t blocks = int64_t{tokens} * kHeads;
  const std::vector<bf16> q = rng.bf16_vector(size_t(tokens) * kLd, 4.f);
  const std::vector<float> w = rng.normal_vector(size_t(blocks));
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& p : pos) p = int32_t(rng.randint(0, kPositions - 1));
  std::vector<float> cos(size_t(kPositions) * kRopePairs), sin(cos.size());
  DSA_RETURN_IF_ERROR(rope_table_ref({RopeConfig{}, kPositions, cos.data(), sin.data()}));
  DSA_ASSIGN_OR_RETURN(auto dq, cuda::DeviceBuffer<bf16>::from_host(std::span<const bf16>(q)));
  DSA_ASSIGN_OR_RETURN(auto dw, cuda::DeviceBuffer<float>::from_host(std::span<const float>(w)));
  DSA_ASSIGN_OR_RETURN(auto dpos,
                       cuda::DeviceBuffer<int32_t>::from_host(std::span<const int32_t>(pos)));
  DSA_ASSIGN_OR_RETURN(auto dcos,
                       cuda::DeviceBuffer<float>::from_host(std::span<const float>(cos)));
  DSA_ASSIGN_OR_RETURN(auto dsin,
                       cuda::DeviceBuffer<float>::from_host(std::span<const float>(sin)));
  DSA_ASSIGN_OR_RETURN(auto dq8,
                       cuda::DeviceBuffer<uint8_t>::alloc(size_t(blocks) * kIndexHeadDim));
  DSA_ASSIGN_OR_RETURN(auto dense, cuda::DeviceBuffer<bf16>::alloc(size_t(tokens) * kRow));
  const float fold = static_cast<float>(1.0 / std::sqrt(double(kHeads) * kIndexHeadDim));
  const cudaStream_t stream = cuda::current_stream();

  // Every launch scales w in place again; the values of w do not change the work.
  IndexerQueryParams p;
  p.q = dq.data() + kQbColumns;
  p.q_token_stride = kLd;
  p.q8 = dq8.data();
  p.w = dw.data();
  p.num_tokens = tokens;
  p.num_heads = kHeads;
  p.fold = fold;
  p.style = RopeStyle::kNonInterleaved;  // V3.2's indexer_rope_interleave false
  p.positions = dpos.data();
  p.cos = dcos.data();
  p.sin = dsin.data();
  p.num_positions = kPositions;
  DSA_ASSIGN_OR_RETURN(double fused_us,
                       cuda::median_us([&] { return indexer_query_cuda(p); }, stream));

  RopeParams rp;
  rp.x = dense.data();
  rp.positions = dpos.data();
  rp.cos = dcos.data();
  rp.sin = dsin.data();
  rp.num_tokens = tokens;
  rp.num_heads = kHeads;
  rp.token_stride = kRow;
  rp.head_stride = kIndexHeadDim;
  rp.num_positions = kPositions;
  rp.style = p.style;
  const HadamardParams hp{dense.data(), dense.data(), static_cast<int32_t>(blocks)};
  const IndexerQuantParams qp{dense.data(), dq8.data(), dw.data(), blocks, fold};
  const auto unfused = [&]() -> Status {
    DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dense.data(), kRow * sizeof(bf16), p.q,
                                               kLd * sizeof(bf16), kRow * sizeof(bf16),
                                               size_t(tokens), cudaMemcpyDeviceToDevice, stream));
    DSA_RETURN_IF_ERROR(rope_cuda(rp));
    DSA_RETURN_IF_ERROR(hadamard_cuda(hp));
    return indexer_q_quant_cuda(qp);
  };
  DSA_ASSIGN_OR_RETURN(double unfused_us, cuda::median_us(unfused, stream));

  const double bytes = double(blocks) * (3 * kIndexHeadDim + 8);
  char what[96];
  std::snprintf(what, sizeof what, "indexer_query T=%d H_i=%d fused", tokens, kHeads);
  cuda::print_bandwidth(what, fused_us, bytes);
  std::snprintf(what, sizeof what, "indexer_query T=%d H_i=%d unfused (4 ops)", tokens, kHeads);
  cuda::print_bandwidth(what, unfused_us, bytes);
  std::printf("indexer_query T=%d H_i=%d: fused %.2f us, unfused %.2f us, unfused / fused %.2fx\n",
              tokens, kHeads, fused_us, unfused_us, unfused_us / fused_us);
  return ok_status();
}

}  // namespace

int main() {
  set_checked_mode(false);
  return cuda::run_shapes<int32_t>("indexer_query_bench", {1, 4, 32, 512}, bench);
}
