// bf16 values for tests: literals, bit patterns, and blocks that stress the per-block FP8
// quantisers of the cache writes (SPEC.md §2.1): every branch of the scale rule (ordinary
// binades, random finite bit patterns, signed zeros, blocks under the 1e-4 floor, amax at 448 2^k,
// huge values next to subnormals).
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/testing/random.h"

namespace dsa::testing {

inline constexpr int kStressKinds = 6;  // kind in [0, kStressKinds)

inline bf16 bf16_from_bits(uint32_t b) { return bf16{uint16_t(b)}; }

// Hand-computed inputs: each float rounded to bf16.
inline std::vector<bf16> bf16s(std::initializer_list<float> values) {
  std::vector<bf16> out;
  for (float f : values) out.push_back(float_to_bf16(f));
  return out;
}

// A random finite bf16 bit pattern: an all-ones exponent (inf / NaN) loses its top bit.
inline bf16 random_finite_bf16(Rng& rng) {
  uint32_t b = uint32_t(rng.randint(0, 0xFFFF));
  if ((b & 0x7F80u) == 0x7F80u) b &= 0xBFFFu;
  return bf16_from_bits(b);
}

// Fills x[0, n) with values of one stressing `kind`; kind 4 draws uniform(-400, 400) * scale (the
// caller plants the block's 448 scale amax itself).
inline void fill_stress_block(Rng& rng, bf16* x, int n, int kind, float scale) {
  for (int d = 0; d < n; ++d) {
    switch (kind) {
      case 0:
        x[d] = float_to_bf16(rng.normal(0.f, std::exp2(rng.uniform(-12.f, 12.f))));
        break;
      case 1:
        x[d] = random_finite_bf16(rng);
        break;
      case 2:
        x[d] = bf16_from_bits(rng.randint(0, 1) ? 0x8000u : 0u);
        break;
      case 3:
        x[d] = float_to_bf16(rng.normal(0.f, 1e-6f));
        break;
      case 4:
        x[d] = float_to_bf16(rng.uniform(-400.f, 400.f) * scale);
        break;
      default:
        x[d] = d % 2 ? bf16_from_bits(uint32_t(rng.randint(1, 0x7F)))  // subnormal
                     : float_to_bf16(rng.normal(0.f, 1e30f));
        break;
    }
  }
}

}  // namespace dsa::testing
