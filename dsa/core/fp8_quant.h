// Power-of-two FP8 block quantisation (the UE8M0 scale rule, SPEC.md §2.1). Class E: host and
// device run this same code. Never compile callers with --use_fast_math.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/host_device.h"

namespace dsa {

inline constexpr float kQuantAmaxFloor = 1e-4f;

// e = ceil(log2(max(amax, 1e-4) / 448)), computed exactly from the fp32 bits of the quotient.
DSA_HD int32_t pow2_scale_exponent(float amax) {
  float a = amax > kQuantAmaxFloor ? amax : kQuantAmaxFloor;
  float v = a / kE4m3Max;  // IEEE division, round to nearest even; v >= 2.2e-7 is normal
  uint32_t b = float_bits(v);
  int32_t e = static_cast<int32_t>((b >> 23) & 0xFFu) - 127;
  return (b & 0x7FFFFFu) == 0 ? e : e + 1;
}

// 2^e as an fp32, exact for the exponents the rule produces (e in [-22, 128)).
DSA_HD float pow2_float(int32_t e) { return bits_float(static_cast<uint32_t>(e + 127) << 23); }

// Quantises one block x[0, m) to e4m3 codes q[0, m); returns the power-of-two scale s, so that
// x_hat[i] = float(q[i]) * s. Inputs must be finite (callers check in checked mode).
DSA_HD float quantize_block_pow2(const float* x, int m, uint8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < m; ++i) {
    float a = fabsf(x[i]);
    amax = a > amax ? a : amax;
  }
  int32_t e = pow2_scale_exponent(amax);
  float inv = pow2_float(-e);
  for (int i = 0; i < m; ++i) {
    float y = x[i] * inv;  // exact: multiplication by a power of two
    y = y > kE4m3Max ? kE4m3Max : (y < -kE4m3Max ? -kE4m3Max : y);
    q[i] = float_to_e4m3(y).bits;
  }
  return pow2_float(e);
}

}  // namespace dsa
