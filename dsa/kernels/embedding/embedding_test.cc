#include "dsa/kernels/embedding/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/embedding/embedding_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

// Table rows r = [r + 0.5, -(r + 0.5)]; ids [2, 0, 2] -> [2.5, -2.5, 0.5, -0.5, 2.5, -2.5].
TEST(Embedding, HandComputed) {
  std::vector<bf16> table;
  for (int r = 0; r < 3; ++r) {
    table.push_back(float_to_bf16(r + 0.5f));
    table.push_back(float_to_bf16(-(r + 0.5f)));
  }
  std::vector<int32_t> ids = {2, 0, 2};
  std::vector<bf16> y(6, float_to_bf16(NAN));
  ASSERT_TRUE(embedding_ref({ids.data(), table.data(), y.data(), 3, 3, 2}).ok());
  const float want[6] = {2.5f, -2.5f, 0.5f, -0.5f, 2.5f, -2.5f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(bf16_to_float(y[i]), want[i]) << i;
}

TEST(Embedding, RandomMatchesElementwiseLookup) {
  const uint64_t seed = testing::test_seed();
  for (auto [t, v, d] : {std::tuple{37, 6144, 256}, {3, 5, 7}, {1, 1, 1}}) {
    Status s = check_embedding(embedding_ref, t, v, d, seed + v);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}

TEST(Embedding, CheckedIdOutOfVocabIsOutOfRange) {
  std::vector<bf16> table(4 * 2, float_to_bf16(1.f)), y(3 * 2, float_to_bf16(-3.f));
  for (int32_t bad : {4, -1, INT32_MIN}) {
    std::vector<int32_t> ids = {1, 2, bad};
    Status s = embedding_ref({ids.data(), table.data(), y.data(), 3, 4, 2});
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("ids[2] = " + std::to_string(bad)), std::string::npos)
        << s.to_string();
    EXPECT_EQ(bf16_to_float(y[0]), -3.f) << "a rejected call must not write";
  }
}

TEST(Embedding, UncheckedIdOutOfVocabGivesZeroRow) {
  ScopedCheckedMode unchecked(false);
  std::vector<bf16> table(4 * 2, float_to_bf16(1.f)), y(3 * 2, float_to_bf16(-3.f));
  std::vector<int32_t> ids = {1, 9, -5};
  ASSERT_TRUE(embedding_ref({ids.data(), table.data(), y.data(), 3, 4, 2}).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 1.f);
  for (int i = 2; i < 6; ++i) {
    EXPECT_EQ(y[i].bits, 0) << i;  // +0.0, not -0.0 or NaN
  }
}

TEST(Embedding, ZeroTokensIsNoOpWithoutPointers) {
  EXPECT_TRUE(embedding_ref({nullptr, nullptr, nullptr, 0, 10, 4}).ok());
}

TEST(Embedding, Rejects) {
  std::vector<bf16> table(8), y(8);
  std::vector<int32_t> ids = {0, 1};
  struct Case {
    EmbeddingParams p;
    const char* needle;
  } cases[] = {{{ids.data(), table.data(), y.data(), -1, 4, 2}, "num_tokens = -1"},
               {{ids.data(), table.data(), y.data(), 2, 0, 2}, "vocab_size = 0"},
               {{ids.data(), table.data(), y.data(), 2, 4, 0}, "dim = 0"},
               {{nullptr, table.data(), y.data(), 2, 4, 2}, "ids is null"},
               {{ids.data(), nullptr, y.data(), 2, 4, 2}, "table is null"},
               {{ids.data(), table.data(), nullptr, 2, 4, 2}, "y is null"}};
  for (const auto& c : cases) {
    Status s = embedding_ref(c.p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
