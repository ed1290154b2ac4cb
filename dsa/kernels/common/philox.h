// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
// Random123 definition) and the noise of SPEC.md §6.3's position-keyed Gumbel-max sampling.
// Written once as DSA_HD functions so the CPU sampler and a CUDA sampler draw identical bits.
// Hand-written because it is 30 lines and a library would have to be usable in device code too.
#pragma once

#include <math.h>  // ::log, callable from host and device code alike

#include <cstdint>

#include "dsa/core/host_device.h"

namespace dsa::kernels {

struct PhiloxCounter {
  uint32_t w[4];
};
struct PhiloxKey {
  uint32_t w[2];
};

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // multiplies counter word 0
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;  // multiplies counter word 2
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // Weyl key bump, golden ratio
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // Weyl key bump, sqrt(3) - 1
inline constexpr int kPhiloxRounds = 10;

// One Philox round: two 32x32 -> 64-bit products, the high halves mixed with the key.
DSA_HD PhiloxCounter philox_round(PhiloxCounter c, PhiloxKey k) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c.w[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c.w[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return PhiloxCounter{{hi1 ^ c.w[1] ^ k.w[0], lo1, hi0 ^ c.w[3] ^ k.w[1], lo0}};
}

// Philox-4x32-R: R rounds, the key bumped between rounds (R - 1 bumps). R = 7 exists only so the
// tests can check the key schedule against Random123's 7-round vectors too.
DSA_HD PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k, int rounds) {
  c = philox_round(c, k);
  for (int r = 1; r < rounds; ++r) {
    k.w[0] += kPhiloxW0;
    k.w[1] += kPhiloxW1;
    c = philox_round(c, k);
  }
  return c;
}

DSA_HD PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  return philox4x32(c, k, kPhiloxRounds);
}

// The request's 64-bit seed as a Philox key, low word first.
DSA_HD PhiloxKey philox_key(uint64_t seed) {
  return PhiloxKey{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
}

// §6.3's counter for tokens 4g..4g+3 at absolute position p, purpose 0 (Gumbel noise). Positions
// are int32 everywhere (SPEC.md §1.1), so p fits the 32-bit counter word.
DSA_HD PhiloxCounter sampling_counter(uint32_t token_group, uint32_t position) {
  return PhiloxCounter{{token_group, position, 0u, 0u}};
}

// U = (floor(w / 2^9) + 1/2) * 2^-23 = (2 floor(w / 2^9) + 1) * 2^-24: an odd integer below 2^24
// times a power of two, so exact in fp32, and in [2^-24, 1 - 2^-24] inside (0, 1).
DSA_HD float uniform_from_word(uint32_t w) {
  return static_cast<float>(((w >> 9) << 1) | 1u) * 0x1p-24f;
}

// gamma = -ln(-ln U), in fp64, rounded once to fp32. U in (0, 1) keeps both logs finite:
// gamma is within [-2.81, 16.64].
DSA_HD float gumbel_from_uniform(float u) {
  return static_cast<float>(-::log(-::log(static_cast<double>(u))));
}

}  // namespace dsa::kernels
