#include "dsa/kernels/moe_dispatch/grouped_prefill_plan.h"

#include <algorithm>

namespace dsa::kernels::grouped_fp8 {

std::vector<int32_t> effective_offsets(std::span<const int32_t> offsets, int32_t capacity) {
  std::vector<int32_t> eff(offsets.size());
  int32_t running = 0;
  for (size_t g = 0; g < offsets.size(); ++g) {
    running = std::max(running, offsets[g]);
    eff[g] = std::min(running, capacity);
  }
  return eff;
}

std::vector<PrefillChunk> plan_prefill(std::span<const int32_t> eff, int32_t chunk_rows) {
  std::vector<PrefillChunk> chunks;
  PrefillChunk cur;
  for (size_t g = 0; g + 1 < eff.size(); ++g) {
    for (int32_t pair = eff[g]; pair < eff[g + 1];) {
      const int32_t count = std::min(eff[g + 1] - pair, chunk_rows);
      const int32_t rows = (count + kPrefillPad - 1) / kPrefillPad * kPrefillPad;
      if (cur.rows + rows > chunk_rows) {
        chunks.push_back(std::move(cur));
        cur = PrefillChunk{};
      }
      cur.pieces.push_back(PrefillPiece{int32_t(g), pair, count, cur.rows, rows});
      cur.rows += rows;
      pair += count;
    }
  }
  if (!cur.pieces.empty()) chunks.push_back(std::move(cur));
  return chunks;
}

void chunk_row_info(const PrefillChunk& c, std::span<const uint8_t> group_mask,
                    std::vector<int32_t>* info) {
  info->assign(size_t(c.rows) * kRowInfoWords, -1);
  for (const PrefillPiece& p : c.pieces) {
    for (int32_t r = 0; r < p.rows; ++r) {
      int32_t* row = info->data() + size_t(p.row0 + r) * kRowInfoWords;
      row[0] = r < p.count ? p.pair0 + r : -1;
      row[1] = p.row0;
      row[2] = p.rows;
      row[3] = group_mask[size_t(p.group)];
    }
  }
}

std::vector<PrefillTile> prefill_tiles(const PrefillChunk& c, std::span<const uint8_t> group_mask,
                                       int32_t num_groups, int32_t tile_rows) {
  std::vector<PrefillTile> tiles;
  for (const PrefillPiece& p : c.pieces) {
    for (const int32_t second : {0, 1}) {
      if ((group_mask[size_t(p.group)] & (1 << second)) == 0) continue;
      for (int32_t m = 0; m < p.count; m += tile_rows) {
        PrefillTile t;
        t.row0 = p.row0 + m;
        t.rows = std::min(tile_rows, p.count - m);
        t.run0 = p.row0;
        t.run_rows = p.rows;
        t.weight = second * num_groups + p.group;
        t.second = second;
        tiles.push_back(t);
      }
    }
  }
  return tiles;
}

}  // namespace dsa::kernels::grouped_fp8
