#include <cmath>

#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"

namespace dsa::kernels {

Status validate(const IndexerQuantParams& p) {
  constexpr std::string_view op = "indexer_q_quant";
  DSA_RETURN_IF_ERROR(require_in(op, "num_blocks", p.num_blocks, 0, INT64_MAX));
  if (!(std::isfinite(p.fold) && p.fold > 0.f)) {
    return invalid_argument(fmt::format("{}: fold = {}: must be finite and > 0", op, p.fold));
  }
  if (p.num_blocks == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(op, "q", p.q));
  DSA_RETURN_IF_ERROR(require_pointer(op, "q8", p.q8));
  return require_pointer(op, "w", p.w);
}

Status indexer_q_quant_ref(const IndexerQuantParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  constexpr int kDim = 128;
  float buf[kDim];
  for (int64_t i = 0; i < p.num_blocks; ++i) {
    for (int t = 0; t < kDim; ++t) buf[t] = bf16_to_float(p.q[i * kDim + t]);
    const float qscale = quantize_block_pow2(buf, kDim, &p.q8[i * kDim]);
    p.w[i] = p.w[i] * p.fold * qscale;  // relu(s z) = s relu(z) for s > 0
  }
  return ok_status();
}

}  // namespace dsa::kernels
