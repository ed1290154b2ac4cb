#include <cmath>

#include "dsa/kernels/activation/activation.h"
#include "dsa/kernels/common/validate.h"

namespace dsa::kernels {

Status validate(const SwigluParams& p) {
  DSA_RETURN_IF_ERROR(require_in("swiglu", "n", p.n, 0, INT64_MAX));
  if (p.n == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer("swiglu", "gate", p.gate));
  DSA_RETURN_IF_ERROR(require_pointer("swiglu", "up", p.up));
  return require_pointer("swiglu", "out", p.out);
}

Status swiglu_ref(const SwigluParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  for (int64_t i = 0; i < p.n; ++i) {
    const float g = bf16_to_float(p.gate[i]);
    p.out[i] = float_to_bf16(g / (1.0f + std::exp(-g)) * bf16_to_float(p.up[i]));
  }
  return ok_status();
}

}  // namespace dsa::kernels
