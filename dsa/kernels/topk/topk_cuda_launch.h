// How topk_cuda launches a call (which kernel, CTAs per row, floats per CTA): a pure function of
// the parameters' launch constants, R, ld and the SM count, exposed so benchmarks and tests can
// name the path they measure.
#pragma once

#include <cstdint>

#include "dsa/kernels/topk/topk.h"

namespace dsa::kernels {

// Chunks below this many floats are not split further to fill idle SMs: a CTA's fixed cost
// (bin searches, cluster barriers) would outweigh the shorter load.
inline constexpr int64_t kTopkMinSplitChunk = 8192;

struct TopkLaunch {
  enum class Path { kOnePass, kStream };
  Path path = Path::kOnePass;
  int32_t cluster = 1;    // CTAs per row in the grid
  int32_t chunk_cap = 0;  // one-pass: floats one CTA holds (a multiple of 128)
};

// p must have passed validate().
TopkLaunch choose_topk_launch(const TopkParams& p, int sms);

}  // namespace dsa::kernels
