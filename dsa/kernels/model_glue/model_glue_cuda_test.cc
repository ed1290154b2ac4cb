// GPU tests of the glue ops against the CPU references on fresh random inputs:
// indexer_q_quant and row_copy bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/model_glue/model_glue.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::Rng;

template <typename T>
DeviceBuffer<T> dev(const std::vector<T>& h) {
  auto b = DeviceBuffer<T>::from_host(std::span<const T>(h));
  if (!b.ok()) std::abort();
  return std::move(*b);
}
template <typename T>
std::vector<T> host(const DeviceBuffer<T>& d) {
  auto h = d.download();
  if (!h.ok()) std::abort();
  return std::move(*h);
}

TEST(ModelGlueCuda, IndexerQuantBitIdentical) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 2);
  const int64_t blocks = 1000;
  std::vector<bf16> q(size_t(blocks) * 128);
  for (int64_t b = 0; b < blocks; ++b) {
    const float scale = std::ldexp(1.f, int(rng.randint(-12, 12)));
    for (int t = 0; t < 128; ++t) q[size_t(b * 128 + t)] = float_to_bf16(rng.normal() * scale);
  }
  q[5] = float_to_bf16(0.f);
  std::fill(q.begin() + 128, q.begin() + 256, float_to_bf16(0.f));  // an all-zero block
  auto w = rng.normal_vector(size_t(blocks));
  std::vector<uint8_t> q8(q.size());
  std::vector<float> w_ref = w;
  const float fold = float(1.0 / std::sqrt(16.0) / std::sqrt(128.0));
  ASSERT_TRUE(indexer_q_quant_ref({q.data(), q8.data(), w_ref.data(), blocks, fold}).ok());
  auto dq = dev(q);
  auto dw = dev(w);
  auto dq8 = dev(std::vector<uint8_t>(q.size(), 0xEE));
  ASSERT_TRUE(indexer_q_quant_cuda({dq.data(), dq8.data(), dw.data(), blocks, fold}).ok());
  auto got8 = host(dq8);
  auto gotw = host(dw);
  for (size_t i = 0; i < q8.size(); ++i) ASSERT_EQ(got8[i], q8[i]) << i;
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(gotw[i], w_ref[i]) << i;
}

TEST(ModelGlueCuda, RowCopyBitIdentical) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 3);
  for (int64_t row_bytes : {int64_t{2048}, int64_t{64}, int64_t{6}}) {
    const int32_t src_rows = 50, rows = 20;
    const int64_t stride = row_bytes + 16;
    std::vector<uint8_t> src(size_t(src_rows * stride));
    for (auto& b : src) b = uint8_t(rng.randint(0, 255));
    std::vector<int32_t> idx(rows);
    for (int32_t i = 0; i < rows; ++i) idx[size_t(i)] = i % 7 == 3 ? -1 : (i * 13) % src_rows;
    for (RowCopyMode mode : {RowCopyMode::kGather, RowCopyMode::kScatter}) {
      const bool gather = mode == RowCopyMode::kGather;
      const int32_t dst_rows = gather ? rows : src_rows;
      std::vector<uint8_t> want(size_t(dst_rows * stride), 0x5A);
      RowCopyParams p{src.data(), want.data(), idx.data(), stride, stride,
                      row_bytes,  rows,        src_rows,   mode};
      ASSERT_TRUE(row_copy_ref(p).ok());
      auto ds = dev(src), dd = dev(std::vector<uint8_t>(want.size(), 0x5A));
      auto di = dev(idx);
      p.src = ds.data(), p.dst = dd.data(), p.index = di.data();
      ASSERT_TRUE(row_copy_cuda(p).ok());
      EXPECT_EQ(host(dd), want) << "row_bytes " << row_bytes << (gather ? " gather" : " scatter");
    }
  }
}

}  // namespace
}  // namespace dsa::kernels
