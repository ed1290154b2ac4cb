// SplitMix64 (Steele, Lea and Flood's generator as Vigna states it): a tiny, seedable, portable
// 64-bit stream for synthetic data (benchmark inputs, random checkpoints), the same on every
// platform and compiler, unlike the standard distributions.
#pragma once

#include <cstdint>

namespace dsa {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

}  // namespace dsa
