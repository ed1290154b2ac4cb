// RoPE application (SPEC.md §8.3): fp32 rotation of bf16 pairs, rounded to bf16.
#include "dsa/core/checked_mode.h"
#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "rope";
constexpr int32_t kRopeValues = 2 * kRopePairs;

bool position_in_table(const RopeParams& p, int32_t pos) {
  return pos >= 0 && pos < p.num_positions;
}

// Offsets (within one head's 64 values) of the two members of pair i.
struct PairOffsets {
  int32_t a, b;
};
PairOffsets pair_offsets(RopeStyle style, int32_t i) {
  switch (style) {
    case RopeStyle::kInterleaved:
      return {2 * i, 2 * i + 1};
    case RopeStyle::kNonInterleaved:
      return {i, i + kRopePairs};
  }
  return {i, i + kRopePairs};  // unreachable: validate() rejects other values
}
}  // namespace

Status validate(const RopeParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_heads", p.num_heads, 1, INT32_MAX));
  if (p.style != RopeStyle::kInterleaved && p.style != RopeStyle::kNonInterleaved) {
    return field_error(StatusCode::kInvalidArgument, kOp, "style", static_cast<int64_t>(p.style),
                       "must be kInterleaved or kNonInterleaved");
  }
  if (p.num_heads > 1) {
    DSA_RETURN_IF_ERROR(require_in(kOp, "head_stride", p.head_stride, kRopeValues, INT64_MAX));
  }
  if (p.num_tokens > 1) {
    const int64_t row = int64_t{p.num_heads - 1} * p.head_stride + kRopeValues;
    DSA_RETURN_IF_ERROR(require_in(kOp, "token_stride", p.token_stride, row, INT64_MAX));
  }
  if (p.y != nullptr && p.y == p.x) {
    return invalid_argument("rope: y == x: leave y null to rotate in place");
  }
  if (p.y != nullptr && p.num_heads > 1) {
    DSA_RETURN_IF_ERROR(require_in(kOp, "y_head_stride", p.y_head_stride, kRopeValues, INT64_MAX));
  }
  if (p.y != nullptr && p.num_tokens > 1) {
    const int64_t row = int64_t{p.num_heads - 1} * p.y_head_stride + kRopeValues;
    DSA_RETURN_IF_ERROR(require_in(kOp, "y_token_stride", p.y_token_stride, row, INT64_MAX));
  }
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_positions", p.num_positions, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "x", p.x));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "positions", p.positions));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "cos", p.cos));
  return require_pointer(kOp, "sin", p.sin);
}

Status rope_ref(const RopeParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (checked_mode()) {
    for (int32_t t = 0; t < p.num_tokens; ++t) {
      if (!position_in_table(p, p.positions[t])) {
        return element_error(StatusCode::kOutOfRange, kOp, "positions", t, p.positions[t],
                             fmt::format("must be in [0, num_positions = {})", p.num_positions));
      }
    }
  }
  parallel_for(p.num_tokens, [&](int64_t t) {
    const int32_t pos = p.positions[t];
    const bool rotate = position_in_table(p, pos);  // unchecked: neutralised, left unrotated
    if (!rotate && p.y == nullptr) return;
    const float* cos = p.cos + int64_t{rotate ? pos : 0} * kRopePairs;
    const float* sin = p.sin + int64_t{rotate ? pos : 0} * kRopePairs;
    for (int32_t h = 0; h < p.num_heads; ++h) {
      const bf16* x = p.x + t * p.token_stride + h * p.head_stride;
      bf16* y = p.y == nullptr ? p.x + t * p.token_stride + h * p.head_stride
                               : p.y + t * p.y_token_stride + h * p.y_head_stride;
      for (int32_t i = 0; i < kRopePairs; ++i) {
        const PairOffsets o = pair_offsets(p.style, i);
        const bf16 xa = x[o.a], xb = x[o.b];
        if (!rotate) {
          y[o.a] = xa, y[o.b] = xb;
          continue;
        }
        const float a = bf16_to_float(xa), b = bf16_to_float(xb);
        y[o.a] = float_to_bf16(a * cos[i] - b * sin[i]);
        y[o.b] = float_to_bf16(a * sin[i] + b * cos[i]);
      }
    }
  });
  return ok_status();
}

}  // namespace dsa::kernels
