#include <cmath>

#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/hadamard/hadamard.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "hadamard";
}  // namespace

Status validate(const HadamardParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_rows", p.num_rows, 0, INT32_MAX));
  if (p.num_rows == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "x", p.x));
  return require_pointer(kOp, "y", p.y);
}

Status hadamard_ref(const HadamardParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const double scale = 1.0 / std::sqrt(double{kHadamardDim});
  parallel_for(p.num_rows, [&](int64_t r) {
    double v[kHadamardDim];
    for (int32_t j = 0; j < kHadamardDim; ++j) v[j] = bf16_to_float(p.x[r * kHadamardDim + j]);
    // Butterfly: after the stage of width h, v holds the transform over each block of 2h values;
    // Sylvester order because bit h of the output index picks the difference branch.
    for (int32_t h = 1; h < kHadamardDim; h *= 2) {
      for (int32_t i = 0; i < kHadamardDim; i += 2 * h) {
        for (int32_t j = i; j < i + h; ++j) {
          const double a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
      }
    }
    for (int32_t j = 0; j < kHadamardDim; ++j)
      p.y[r * kHadamardDim + j] = double_to_bf16(v[j] * scale);
  });
  return ok_status();
}

}  // namespace dsa::kernels
