// Grid size of the grid-stride kernels (elementwise ops, one warp or thread per small item): one
// block per `items_per_block` items, at most 132 SMs x 16 blocks in flight; past that, every
// thread loops with the grid's stride, so any size runs on a bounded grid.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dsa::kernels {

inline constexpr int64_t kMaxGridStrideBlocks = 132 * 16;

inline unsigned grid_stride_blocks(int64_t items, int64_t items_per_block) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + items_per_block - 1) / items_per_block,
                                                   1, kMaxGridStrideBlocks));
}

}  // namespace dsa::kernels
