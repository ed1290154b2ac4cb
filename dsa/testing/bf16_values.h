// Hand-written test inputs: bf16 vectors from float literals, for cases computed by hand.
#pragma once

#include <initializer_list>
#include <vector>

#include "dsa/core/dtype.h"

namespace dsa::testing {

inline std::vector<bf16> bf16_values(std::initializer_list<float> values) {
  std::vector<bf16> out;
  out.reserve(values.size());
  for (float v : values) out.push_back(float_to_bf16(v));
  return out;
}

}  // namespace dsa::testing
