// GPU test of indexer_q_quant_cuda against the CPU reference on fresh random inputs: codes and
// folded weights bit-identical (block scales over 2^-12..2^12, one zero element, one zero block).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::dev;
using testing::host;
using testing::Rng;

TEST(IndexerQQuantCuda, BitIdentical) {
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

}  // namespace
}  // namespace dsa::kernels
