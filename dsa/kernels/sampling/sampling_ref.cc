#include <fmt/format.h>

#include <span>

#include "dsa/kernels/sampling/sampler.h"
#include "dsa/kernels/sampling/sampling.h"

namespace dsa::kernels {

Status validate(const SamplingOpParams& p) {
  if (p.rows < 0) return invalid_argument(fmt::format("sampling: rows = {}: must be >= 0", p.rows));
  if (p.vocab < 1) {
    return invalid_argument(fmt::format("sampling: vocab = {}: must be >= 1", p.vocab));
  }
  if (p.rows > 0) {
    if (p.logits == nullptr) return invalid_argument("sampling: logits is null");
    if (p.temperature == nullptr) return invalid_argument("sampling: temperature is null");
    if (p.top_p == nullptr) return invalid_argument("sampling: top_p is null");
    if (p.top_k == nullptr) return invalid_argument("sampling: top_k is null");
    if (p.seed == nullptr) return invalid_argument("sampling: seed is null");
    if (p.position == nullptr) return invalid_argument("sampling: position is null");
    if (p.out == nullptr) return invalid_argument("sampling: out is null");
  }
  return ok_status();
}

Status sample_rows_ref(const SamplingOpParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  for (int32_t r = 0; r < p.rows; ++r) {
    SamplingParams sp;
    sp.temperature = p.temperature[r];
    sp.top_p = p.top_p[r];
    sp.top_k = p.top_k[r];
    sp.seed = p.seed[r];
    if (Status s = validate(sp); !s.ok()) {
      return invalid_argument(fmt::format("sampling: row {}: {}", r, s.message()));
    }
    if (p.position[r] < 0) {
      return invalid_argument(
          fmt::format("sampling: row {}: position = {}: must be >= 0", r, p.position[r]));
    }
    const std::span<const float> row(p.logits + int64_t{r} * p.vocab, size_t(p.vocab));
    p.out[r] = sample_token(row, sp, p.position[r]);
  }
  return ok_status();
}

}  // namespace dsa::kernels
