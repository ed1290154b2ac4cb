// The acceptance op's CPU reference (kernels/acceptance, which the CUDA kernel is tested against)
// equals the engine's host rule accept_drafts on fuzzed verify batches: the same accepted count
// and the same emitted tokens for every request, greedy and sampled, edge rows included. The test
// lives here because kernels/ cannot include the engine.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dsa/engine/acceptance.h"
#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/kernels/acceptance/acceptance_test_util.h"
#include "dsa/testing/random.h"

namespace dsa::engine {
namespace {

using kernels::acceptance_test::AcceptBatch;
using kernels::acceptance_test::random_batch;

TEST(AcceptanceOpEquivalence, ReferenceEqualsTheHostRule) {
  testing::Rng rng(testing::test_seed());
  int requests = 0, accepted_drafts = 0;
  for (int32_t V : {1, 3, 16, 257, 4096}) {
    for (int32_t d : {0, 1, 2, 4, 7}) {
      for (int rep = 0; rep < 3; ++rep) {
        const AcceptBatch a = random_batch(rng, 10, d, V, rep + 3);
        const int32_t n = a.rows_per_request();
        std::vector<int32_t> acc(size_t(a.requests)), emit(size_t(a.requests) * size_t(n));
        ASSERT_TRUE(kernels::accept_drafts_ref(a.host_params(acc.data(), emit.data())).ok());
        for (int32_t b = 0; b < a.requests; ++b) {
          const AcceptResult r = accept_drafts(a.rows(b), V, a.drafts_of(b), a.sampling(b),
                                               a.first_position[size_t(b)]);
          ASSERT_EQ(acc[size_t(b)], r.accepted) << "V " << V << " d " << d << " request " << b;
          std::vector<int32_t> op(emit.begin() + b * n, emit.begin() + b * n + r.accepted + 1);
          EXPECT_EQ(op, r.emitted) << "V " << V << " d " << d << " request " << b;
          for (int32_t j = r.accepted + 1; j < n; ++j) EXPECT_EQ(emit[size_t(b * n + j)], -1);
          ++requests;
          accepted_drafts += r.accepted;
        }
      }
    }
  }
  std::printf("%d requests, %d drafts accepted\n", requests, accepted_drafts);
  EXPECT_GT(accepted_drafts, 0);
}

}  // namespace
}  // namespace dsa::engine
