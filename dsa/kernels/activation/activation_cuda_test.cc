// GPU test of swiglu_cuda against the CPU reference on fresh random inputs: bit-identical wherever
// the host's expf is correctly rounded (the count of differing elements is printed; each differs
// by <= 1 bf16 ulp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "dsa/kernels/activation/activation.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::dev;
using testing::host;
using testing::Rng;

TEST(ActivationCuda, SwigluMatchesReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const int64_t n = 1 << 20;
  std::vector<bf16> g(n), u(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = float_to_bf16(rng.normal() * std::ldexp(1.f, int(rng.randint(-4, 4))));
    u[i] = float_to_bf16(rng.normal());
  }
  std::vector<bf16> want(n);
  ASSERT_TRUE(swiglu_ref({g.data(), u.data(), want.data(), n}).ok());
  auto dg = dev(g), du = dev(u);
  auto dout = dev(std::vector<bf16>(n, bf16{0xFFFF}));
  ASSERT_TRUE(swiglu_cuda({dg.data(), du.data(), dout.data(), n}).ok());
  auto got = host(dout);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int d = bf16_ulp_distance(got[i], want[i]);
    ASSERT_LE(d, 1) << "i=" << i << " g=" << bf16_to_float(g[i]);
    differ += d != 0;
  }
  std::printf("swiglu: %lld of %lld elements differ from the reference (by 1 bf16 ulp)\n",
              (long long)differ, (long long)n);
  EXPECT_LE(differ, n / 10000);
}

}  // namespace
}  // namespace dsa::kernels
