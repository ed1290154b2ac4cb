#include "dsa/kernels/hadamard/hadamard_check.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

Status check_hadamard(HadamardFn op, int32_t rows, uint64_t seed) {
  if (rows < 1)
    return invalid_argument(fmt::format("check_hadamard: rows = {}: must be >= 1", rows));
  testing::Rng rng(seed);
  const size_t n = size_t(rows) * kHadamardDim;
  std::vector<bf16> x(n);
  for (int32_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.f, int(rng.randint(-8, 8)));
    for (int32_t j = 0; j < kHadamardDim; ++j)
      x[size_t(r) * kHadamardDim + j] = float_to_bf16(rng.normal() * scale);
  }
  std::vector<bf16> y(n, float_to_bf16(NAN));
  HadamardParams p{x.data(), y.data(), rows};
  DSA_RETURN_IF_ERROR(op(p));

  const long double norm = 1.0L / std::sqrt(static_cast<long double>(kHadamardDim));
  for (int32_t r = 0; r < rows; ++r) {
    const bf16* xr = &x[size_t(r) * kHadamardDim];
    for (uint32_t u = 0; u < uint32_t(kHadamardDim); ++u) {
      long double sum = 0;  // the definition, term by term
      for (uint32_t v = 0; v < uint32_t(kHadamardDim); ++v) {
        const long double term = bf16_to_float(xr[v]);
        sum += (std::popcount(u & v) % 2 == 0) ? term : -term;
      }
      const bf16 want = double_to_bf16(static_cast<double>(sum * norm));
      const bf16 got = y[size_t(r) * kHadamardDim + u];
      if (bf16_ulp_distance(got, want) > 1) {
        return internal_error(fmt::format("hadamard: y[{}][{}] = {}, expected {} (> 1 bf16 ulp)", r,
                                          u, bf16_to_float(got), bf16_to_float(want)));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
