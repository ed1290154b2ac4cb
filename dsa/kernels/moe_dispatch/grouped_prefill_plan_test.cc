// CPU tests of the FP8 grouped linear's prefill plan (grouped_prefill_plan.h): the clamped
// offsets, and that the chunks cover every pair of every group exactly once, in order, with each
// run padded to kPrefillPad rows and no chunk over its rows; the per-row words the kernels read.
#include "dsa/kernels/moe_dispatch/grouped_prefill_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "dsa/testing/random.h"

namespace dsa::kernels::grouped_fp8 {
namespace {

TEST(GroupedPrefillPlan, EffectiveOffsetsClampAndNeverDecrease) {
  const std::vector<int32_t> offsets = {-3, 4, 2, 9, 40, 12};
  EXPECT_EQ(effective_offsets(offsets, 30), (std::vector<int32_t>{0, 4, 4, 9, 30, 30}));
  EXPECT_EQ(effective_offsets(offsets, 0), (std::vector<int32_t>(6, 0)));
  EXPECT_EQ(effective_offsets(std::vector<int32_t>{-7, -2, -9}, 5), (std::vector<int32_t>(3, 0)));
}

// Every pair of eff once, group by group, in order; runs padded; chunks within their rows.
void expect_covers(const std::vector<int32_t>& eff, int32_t chunk_rows) {
  const std::vector<PrefillChunk> chunks = plan_prefill(eff, chunk_rows);
  size_t g = 0;
  int32_t next_pair = eff.empty() ? 0 : eff[0];
  for (const PrefillChunk& c : chunks) {
    ASSERT_FALSE(c.pieces.empty());
    ASSERT_LE(c.rows, chunk_rows);
    int32_t row = 0;
    for (const PrefillPiece& p : c.pieces) {
      while (g + 1 < eff.size() && next_pair >= eff[g + 1]) ++g;  // groups already done or empty
      ASSERT_EQ(p.group, int32_t(g));
      ASSERT_EQ(p.pair0, next_pair);
      ASSERT_GE(p.count, 1);
      ASSERT_LE(p.pair0 + p.count, eff[g + 1]);
      ASSERT_EQ(p.row0, row);
      ASSERT_EQ(p.rows % kPrefillPad, 0);
      ASSERT_GE(p.rows, p.count);
      ASSERT_LT(p.rows - p.count, kPrefillPad);
      next_pair += p.count;
      row += p.rows;
    }
    ASSERT_EQ(row, c.rows);
    // The row words: each piece's rows name its pairs, then padding (-1), with the piece's run
    // and its group's mask.
    std::vector<uint8_t> mask(eff.size() - 1);
    for (size_t k = 0; k < mask.size(); ++k) mask[k] = uint8_t(k % 4);
    std::vector<int32_t> info;
    chunk_row_info(c, mask, &info);
    ASSERT_EQ(info.size(), size_t(c.rows) * kRowInfoWords);
    for (const PrefillPiece& p : c.pieces) {
      for (int32_t r = 0; r < p.rows; ++r) {
        const int32_t* w = info.data() + size_t(p.row0 + r) * kRowInfoWords;
        ASSERT_EQ(w[0], r < p.count ? p.pair0 + r : -1);
        ASSERT_EQ(w[1], p.row0);
        ASSERT_EQ(w[2], p.rows);
        ASSERT_EQ(w[3], int32_t(mask[size_t(p.group)]));
      }
    }
  }
  EXPECT_EQ(next_pair, eff.empty() ? 0 : eff.back());
}

TEST(GroupedPrefillPlan, CoversEveryPairOnceInOrder) {
  testing::Rng rng(71);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t G = int32_t(rng.randint(1, 300));
    const int32_t chunk_rows = kPrefillPad * int32_t(rng.randint(1, 40));
    std::vector<int32_t> eff(size_t(G) + 1, 0);
    eff[0] = int32_t(rng.randint(0, 5));
    for (int32_t g = 0; g < G; ++g) {
      // Empty groups, small ones and some larger than a chunk.
      const int kind = int(rng.randint(0, 9));
      const int32_t n = kind < 3   ? 0
                        : kind < 8 ? int32_t(rng.randint(1, 40))
                                   : int32_t(rng.randint(1, 3 * chunk_rows));
      eff[size_t(g) + 1] = eff[size_t(g)] + n;
    }
    expect_covers(eff, chunk_rows);
  }
}

TEST(GroupedPrefillPlan, NoPairsNoChunks) {
  EXPECT_TRUE(plan_prefill(std::vector<int32_t>{0, 0, 0}, 64).empty());
  EXPECT_TRUE(plan_prefill(std::vector<int32_t>{5, 5}, 64).empty());
}

TEST(GroupedPrefillPlan, GroupLargerThanAChunkIsSplit) {
  const std::vector<PrefillChunk> chunks = plan_prefill(std::vector<int32_t>{0, 70, 71}, 32);
  // Group 0: 32 + 32 + 6 pairs (the last padded to 16), then group 1's one pair.
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].rows, 32);
  EXPECT_EQ(chunks[1].rows, 32);
  ASSERT_EQ(chunks[2].pieces.size(), 2u);
  EXPECT_EQ(chunks[2].pieces[0].count, 6);
  EXPECT_EQ(chunks[2].pieces[0].rows, 16);
  EXPECT_EQ(chunks[2].pieces[1].group, 1);
  EXPECT_EQ(chunks[2].pieces[1].row0, 16);
  EXPECT_EQ(chunks[2].rows, 32);
}

TEST(GroupedPrefillPlan, RowInfoNamesPairsRunsAndMasks) {
  const std::vector<PrefillChunk> chunks = plan_prefill(std::vector<int32_t>{2, 5, 5, 23}, 64);
  ASSERT_EQ(chunks.size(), 1u);
  const std::vector<uint8_t> mask = {1, 3, 2};
  std::vector<int32_t> info;
  chunk_row_info(chunks[0], mask, &info);
  ASSERT_EQ(info.size(), size_t(chunks[0].rows) * kRowInfoWords);
  ASSERT_EQ(chunks[0].rows, 16 + 32);
  for (int32_t t = 0; t < chunks[0].rows; ++t) {
    const int32_t* r = info.data() + size_t(t) * kRowInfoWords;
    if (t < 16) {  // group 0: pairs 2..4, then padding
      EXPECT_EQ(r[0], t < 3 ? 2 + t : -1) << t;
      EXPECT_EQ(r[1], 0);
      EXPECT_EQ(r[2], 16);
      EXPECT_EQ(r[3], 1);
    } else {  // group 2 (group 1 is empty): pairs 5..22
      EXPECT_EQ(r[0], t - 16 < 18 ? 5 + (t - 16) : -1) << t;
      EXPECT_EQ(r[1], 16);
      EXPECT_EQ(r[2], 32);
      EXPECT_EQ(r[3], 2);
    }
  }
}

// The prefill GEMM's tiles: real pairs only (not the padding), at most tile_rows each, a piece's
// first projection then its second where its group's mask bit is set, the second's weight index
// offset by G.
TEST(GroupedPrefillPlan, TilesCoverRealPairsPerProjection) {
  // Groups (G = 3): 0 has 2 pairs, 1 has 9 (mask: second only), 2 has 0, ... in one chunk of 64.
  const std::vector<PrefillChunk> chunks = plan_prefill(std::vector<int32_t>{0, 2, 11, 11}, 64);
  ASSERT_EQ(chunks.size(), 1u);
  const std::vector<uint8_t> mask = {3, 2, 1};
  const std::vector<PrefillTile> tiles = prefill_tiles(chunks[0], mask, 3, 4);
  // Group 0 (rows 0..15, 2 pairs): first then second, one tile each; group 1 (rows 16..31, 9
  // pairs): second only, tiles of 4, 4, 1.
  ASSERT_EQ(tiles.size(), 5u);
  const int32_t want[5][6] = {{0, 2, 0, 16, 0, 0},
                              {0, 2, 0, 16, 3, 1},
                              {16, 4, 16, 16, 4, 1},
                              {20, 4, 16, 16, 4, 1},
                              {24, 1, 16, 16, 4, 1}};
  for (size_t i = 0; i < tiles.size(); ++i) {
    const PrefillTile& t = tiles[i];
    const int32_t got[6] = {t.row0, t.rows, t.run0, t.run_rows, t.weight, t.second};
    for (int f = 0; f < 6; ++f) EXPECT_EQ(got[f], want[i][f]) << "tile " << i << " field " << f;
  }
  // No usable projection: no tile.
  EXPECT_TRUE(prefill_tiles(chunks[0], std::vector<uint8_t>{0, 0, 0}, 3, 4).empty());
}

}  // namespace
}  // namespace dsa::kernels::grouped_fp8
