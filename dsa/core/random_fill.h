// Counter-based random values for weights generated where they live (--random-weights on a
// device, model/backend_random_weights.h): value i of a tensor is a pure function of (the tensor's
// key, i), so a fill needs no host copy, no state and no order, and the host loop and the CUDA
// kernel (cuda/random_fill.cu) write the same bits. One DSA_HD formula for both (SPEC.md inv. 16).
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/host_device.h"

namespace dsa {

enum class FillKind : uint8_t {
  kBf16Uniform,  // bf16(value * u), u uniform in [-1, 1)
  kE4m3Uniform,  // e4m3 codes of value * u (value <= 448: the code amplitude under its scale)
  kBf16Const,    // bf16(value)
  kF32Const,     // value
};

struct FillSpec {
  FillKind kind = FillKind::kBf16Const;
  uint64_t key = 0;  // the tensor's stream (seed and tensor id mixed)
  float value = 0;   // amplitude for the uniform kinds, the constant otherwise
};

// SplitMix64's finaliser: a bijective 64-bit mix (Steele, Lea and Flood).
DSA_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) with 24 bits, for element i of the stream `key`.
DSA_HD float hashed_uniform(uint64_t key, uint64_t i) {
  const uint64_t bits = mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
  return float(uint32_t(bits >> 40)) * 0x1p-23f - 1.0f;
}

// Bytes per element of a fill.
DSA_HD uint32_t fill_elem_bytes(FillKind k) {
  return k == FillKind::kE4m3Uniform ? 1u : k == FillKind::kF32Const ? 4u : 2u;
}

// Writes element i of `f` into `dst` (an array of the kind's element type).
DSA_HD void fill_element(const FillSpec& f, void* dst, uint64_t i) {
  switch (f.kind) {
    case FillKind::kBf16Uniform:
      static_cast<bf16*>(dst)[i] = float_to_bf16(f.value * hashed_uniform(f.key, i));
      return;
    case FillKind::kE4m3Uniform:
      static_cast<e4m3*>(dst)[i] = float_to_e4m3(f.value * hashed_uniform(f.key, i));
      return;
    case FillKind::kBf16Const:
      static_cast<bf16*>(dst)[i] = float_to_bf16(f.value);
      return;
    case FillKind::kF32Const:
      static_cast<float*>(dst)[i] = f.value;
      return;
  }
}

}  // namespace dsa
