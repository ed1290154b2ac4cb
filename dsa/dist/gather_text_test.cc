// all_gather_text over the in-process group: every rank gets every rank's bytes, in rank order,
// for empty texts, texts that straddle and span the chunks, and every byte value (0x00 and 0xff
// included, where a packing or carry bug would show).
#include "dsa/dist/gather_text.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "dsa/dist/local_group.h"

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

TEST(AllGatherText, EveryRankGetsEveryRanksBytesInRankOrder) {
  constexpr size_t kChunk = kMaxAllReduceValues * sizeof(int64_t);
  // Per world size, each rank's length: empty ranks, a one-byte rank, a rank across a chunk edge
  // (not a multiple of 8), one longer than two chunks.
  const std::vector<std::vector<size_t>> cases = {{0},
                                                  {13},
                                                  {0, 0},
                                                  {1, kChunk - 3},
                                                  {kChunk + 5, 0, 7},
                                                  {2 * kChunk + 11, 9, 0, 1, 64, 3, 0, 8}};
  uint64_t seed = 1;
  for (const std::vector<size_t>& lengths : cases) {
    const auto world = static_cast<int32_t>(lengths.size());
    auto g = LocalGroup::create(world, 5000ms);
    ASSERT_TRUE(g.ok());
    std::vector<std::string> texts;
    for (size_t n : lengths) texts.push_back(random_bytes(n, seed++));
    std::vector<StatusOr<std::vector<std::string>>> got(size_t(world), internal_error("not run"));
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < world; ++r) {
      threads.emplace_back(
          [&, r] { got[size_t(r)] = all_gather_text((*g)->rank(r), texts[size_t(r)]); });
    }
    for (auto& t : threads) t.join();
    for (int32_t r = 0; r < world; ++r) {
      ASSERT_TRUE(got[size_t(r)].ok()) << got[size_t(r)].status().to_string();
      ASSERT_EQ(got[size_t(r)]->size(), texts.size());
      for (size_t q = 0; q < texts.size(); ++q) {
        EXPECT_EQ((*got[size_t(r)])[q], texts[q])
            << "world " << world << ", rank " << r << " receiving rank " << q;
      }
    }
  }
}

TEST(AllGatherText, ABrokenGroupIsReported) {
  auto g = LocalGroup::create(2, 200ms);
  ASSERT_TRUE(g.ok());
  // Rank 1 never calls: rank 0's first all_reduce (the lengths) times out.
  auto got = all_gather_text((*g)->rank(0), "text");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("ranks [1] missing"), std::string::npos)
      << got.status().to_string();
}

}  // namespace
}  // namespace dsa::dist
