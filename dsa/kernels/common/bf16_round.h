// Rounding helpers shared by the model-op references (norms, linear, Hadamard, RoPE) and their
// checks. Only ops use them, so they live in kernels/common/, header-only, until core/dtype.h
// grows a double -> bf16 conversion.
//  - double_to_bf16: the correctly rounded (RNE) bf16 of a double. Going through float first can
//    round twice (the float may land exactly on a bf16 tie); this breaks such ties from the double.
//  - bf16_ulp_distance: how many bf16 steps separate two bf16 values (class T bounds of §8.3/§8.5
//    are "<= 1 bf16 ulp from the correctly rounded reference").
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "dsa/core/dtype.h"

namespace dsa::kernels {

inline bf16 double_to_bf16(double d) {
  float f = static_cast<float>(d);
  uint32_t u = float_bits(f);
  if (std::isfinite(f) && (u & 0xFFFFu) == 0x8000u && static_cast<double>(f) != d) {
    // f is a bf16 tie only because of the first rounding: the double says which side wins.
    bool away_from_zero = std::fabs(d) > std::fabs(static_cast<double>(f));
    return bf16{static_cast<uint16_t>((u >> 16) + (away_from_zero ? 1u : 0u))};
  }
  return float_to_bf16(f);
}

// Maps bf16 bits onto a line where adjacent values differ by 1 (+0 and -0 coincide).
inline int32_t bf16_ordinal(bf16 v) {
  int32_t mag = v.bits & 0x7FFF;
  return (v.bits & 0x8000) ? -mag : mag;
}

// Steps between a and b; NaN against anything but NaN is "infinitely" far (INT32_MAX).
inline int32_t bf16_ulp_distance(bf16 a, bf16 b) {
  bool na = std::isnan(bf16_to_float(a)), nb = std::isnan(bf16_to_float(b));
  if (na || nb) return na && nb ? 0 : INT32_MAX;
  return std::abs(bf16_ordinal(a) - bf16_ordinal(b));
}

}  // namespace dsa::kernels
