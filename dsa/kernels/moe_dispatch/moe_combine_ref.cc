#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/moe_dispatch/moe_combine.h"

namespace dsa::kernels {

Status validate(const MoeCombineParams& p) {
  constexpr std::string_view op = "moe_combine";
  DSA_RETURN_IF_ERROR(require_in(op, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "top_k", p.top_k, 1, 64));
  DSA_RETURN_IF_ERROR(require_in(op, "dim", p.dim, 1, INT32_MAX));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(op, "routed", p.routed));
  DSA_RETURN_IF_ERROR(require_pointer(op, "expert_ids", p.expert_ids));
  DSA_RETURN_IF_ERROR(require_pointer(op, "weights", p.weights));
  return require_pointer(op, "y", p.y);
}

Status moe_combine_ref(const MoeCombineParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const int64_t D = p.dim, k = p.top_k;
  for (int64_t r = 0; r < p.num_tokens; ++r) {
    for (int64_t t = 0; t < D; ++t) {
      float acc = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        if (p.expert_ids[r * k + j] < 0) continue;  // padded rows: no expert
        acc += p.weights[r * k + j] * bf16_to_float(p.routed[(r * k + j) * D + t]);
      }
      if (p.shared) acc += bf16_to_float(p.shared[r * D + t]);
      p.y[r * D + t] = float_to_bf16(acc);
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
