// GPU test of moe_combine_cuda against the CPU reference on fresh random inputs: bit-identical,
// with and without the shared expert.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/kernels/moe_dispatch/moe_combine.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::dev;
using testing::host;
using testing::Rng;

TEST(MoeCombineCuda, BitIdentical) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 1);
  const int32_t T = 37, k = 8, D = 256;
  auto routed = rng.bf16_vector(size_t(T) * k * D);
  auto shared = rng.bf16_vector(size_t(T) * D);
  std::vector<int32_t> ids(size_t(T) * k);
  std::vector<float> w(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = i / k >= 30 ? -1 : int32_t(rng.randint(0, 255));  // rows 30.. padded
    w[i] = std::fabs(rng.normal());
  }
  for (bool with_shared : {true, false}) {
    std::vector<bf16> want(size_t(T) * D);
    MoeCombineParams p{routed.data(), ids.data(), w.data(), with_shared ? shared.data() : nullptr,
                       want.data(),   T,          k,        D};
    ASSERT_TRUE(moe_combine_ref(p).ok());
    auto dr = dev(routed), ds = dev(shared), dy = dev(std::vector<bf16>(want.size()));
    auto di = dev(ids);
    auto dw = dev(w);
    p.routed = dr.data(), p.expert_ids = di.data(), p.weights = dw.data();
    p.shared = with_shared ? ds.data() : nullptr, p.y = dy.data();
    ASSERT_TRUE(moe_combine_cuda(p).ok());
    auto got = host(dy);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].bits, want[i].bits) << i;
  }
}

}  // namespace
}  // namespace dsa::kernels
