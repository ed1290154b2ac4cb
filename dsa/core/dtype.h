// Element types and their exact conversions (SPEC.md §1.1).
//  - bf16: float -> bf16 rounds to nearest even; NaN stays NaN (quiet).
//  - e4m3: OCP FP8 E4M3FN (bias 7, max 448, subnormals down to 2^-9, no inf, NaN = 0x7F/0xFF);
//    float -> e4m3 clamps to +-448 first, then rounds to nearest even; the sign of zero is kept.
// Everything here is bit manipulation on IEEE floats, so host and device agree bit for bit.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "dsa/core/host_device.h"

namespace dsa {

struct bf16 {
  uint16_t bits;
};
struct e4m3 {
  uint8_t bits;
};

DSA_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
DSA_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

DSA_HD float bf16_to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

DSA_HD bf16 float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  uint32_t bias = 0x7FFFu + ((u >> 16) & 1u);  // ties go to the even upper half
  return bf16{static_cast<uint16_t>((u + bias) >> 16)};
}

// Rounds a bf16-representable value through bf16 (convenience for references).
DSA_HD float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

inline constexpr float kE4m3Max = 448.0f;

DSA_HD float e4m3_to_float(e4m3 v) {
  uint32_t sign = (v.bits & 0x80u) << 24;
  uint32_t exp = (v.bits >> 3) & 0xFu;
  uint32_t man = v.bits & 0x7u;
  if ((v.bits & 0x7Fu) == 0x7Fu) return bits_float(sign | 0x7FC00000u);  // NaN
  if (exp == 0) {
    // Subnormal: man * 2^-9, exact in fp32.
    float mag = static_cast<float>(man) * 0.001953125f;
    return bits_float(sign | float_bits(mag));
  }
  return bits_float(sign | ((exp - 7u + 127u) << 23) | (man << 20));
}

DSA_HD e4m3 float_to_e4m3(float f) {
  uint32_t u = float_bits(f);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t mag_bits = u & 0x7FFFFFFFu;
  if (mag_bits > 0x7F800000u) return e4m3{static_cast<uint8_t>(sign | 0x7Fu)};  // NaN
  float a = bits_float(mag_bits);
  if (a > kE4m3Max) a = kE4m3Max;  // explicit clamp before rounding (SPEC.md §1.1)
  if (a < 0.015625f) {
    // Subnormal range (< 2^-6): the code is round_even(a / 2^-9); 8 lands on the min normal 0x08.
    float scaled = a * 512.0f;  // exact: scaling by a power of two
    uint32_t q = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return e4m3{static_cast<uint8_t>(sign | q)};
  }
  uint32_t ab = float_bits(a);
  int32_t e = static_cast<int32_t>(ab >> 23) - 127;  // in [-6, 8]
  uint32_t man = ab & 0x7FFFFFu;
  uint32_t keep = man >> 20;
  uint32_t rest = man & 0xFFFFFu;
  uint32_t code = (static_cast<uint32_t>(e + 7) << 3) + keep;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++code;  // carry may bump the exponent
  return e4m3{static_cast<uint8_t>(sign | code)};
}

enum class DType { kF32, kBF16, kE4M3, kI32, kU8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kE4M3:
    case DType::kU8:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t);

}  // namespace dsa
