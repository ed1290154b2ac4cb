// The indexer's query side (SPEC.md §8.5 steps 1, 3-5) on the CPU: literally the unfused sequence
// (the heads copied out, rope_ref, hadamard_ref, indexer_q_quant_ref), so the CPU model is
// bit-identical with or without the fusion and the two can never drift apart.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/common/spans.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/indexer_query/indexer_query.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"

namespace dsa::kernels {

namespace {

constexpr std::string_view kOp = "indexer_query";

}  // namespace

Status validate(const IndexerQueryParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_heads", p.num_heads, 1, INT32_MAX));
  const int64_t row = int64_t{p.num_heads} * kIndexHeadDim;  // the heads of one token
  DSA_RETURN_IF_ERROR(require_in(kOp, "q_token_stride", p.q_token_stride, row, INT64_MAX));
  if (!(std::isfinite(p.fold) && p.fold > 0.f)) {
    return invalid_argument(fmt::format("{}: fold = {}: must be finite and > 0", kOp, p.fold));
  }
  if (p.style != RopeStyle::kInterleaved && p.style != RopeStyle::kNonInterleaved) {
    return field_error(StatusCode::kInvalidArgument, kOp, "style", static_cast<int64_t>(p.style),
                       "must be kInterleaved or kNonInterleaved");
  }
  // One warp (CUDA) and one Hadamard row (hadamard_ref's int32 count) per (token, head).
  const int64_t blocks = int64_t{p.num_tokens} * p.num_heads;
  if (blocks > INT32_MAX) {
    return invalid_argument(fmt::format("{}: num_tokens * num_heads = {} * {}: must be <= {}", kOp,
                                        p.num_tokens, p.num_heads, INT32_MAX));
  }
  // As in rope: with no tokens the table is never read.
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_positions", p.num_positions, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "q", p.q));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "q8", p.q8));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "w", p.w));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "positions", p.positions));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "cos", p.cos));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "sin", p.sin));
  // q from its first head to the last token's last head (rows_span saturates), q8 and w dense.
  const int64_t q_elems = rows_span(p.num_tokens, p.q_token_stride, row);
  const uint64_t q_bytes =
      uint64_t(q_elems) > UINT64_MAX / sizeof(bf16) ? UINT64_MAX : uint64_t(q_elems) * sizeof(bf16);
  const uint64_t q8_bytes = uint64_t(blocks) * kIndexHeadDim;
  const uint64_t w_bytes = uint64_t(blocks) * sizeof(float);
  if (bytes_overlap(p.q8, q8_bytes, p.q, q_bytes)) {
    return invalid_argument(fmt::format("{}: q8 = {} overlaps q = {}: q is only read", kOp,
                                        fmt::ptr(p.q8), fmt::ptr(p.q)));
  }
  if (bytes_overlap(p.w, w_bytes, p.q, q_bytes)) {
    return invalid_argument(fmt::format("{}: w = {} overlaps q = {}: q is only read", kOp,
                                        fmt::ptr(p.w), fmt::ptr(p.q)));
  }
  if (bytes_overlap(p.w, w_bytes, p.q8, q8_bytes)) {
    return invalid_argument(fmt::format("{}: w = {} overlaps q8 = {}: they must be separate", kOp,
                                        fmt::ptr(p.w), fmt::ptr(p.q8)));
  }
  return ok_status();
}

Status indexer_query_ref(const IndexerQueryParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  if (checked_mode()) {  // rope_ref's rule, named for this op
    for (int32_t t = 0; t < p.num_tokens; ++t) {
      const int32_t pos = p.positions[t];
      if (pos < 0 || pos >= p.num_positions) {
        return element_error(StatusCode::kOutOfRange, kOp, "positions", t, pos,
                             fmt::format("must be in [0, num_positions = {})", p.num_positions));
      }
    }
  }
  const int64_t row = int64_t{p.num_heads} * kIndexHeadDim;
  // The copy out of the fused projection's columns (the model's copy_rows_2d).
  std::vector<bf16> q(size_t(p.num_tokens) * size_t(row));
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    std::memcpy(&q[size_t(t) * size_t(row)], p.q + int64_t{t} * p.q_token_stride,
                size_t(row) * sizeof(bf16));
  }
  RopeParams rp;
  rp.x = q.data();
  rp.positions = p.positions;
  rp.cos = p.cos;
  rp.sin = p.sin;
  rp.num_tokens = p.num_tokens;
  rp.num_heads = p.num_heads;
  rp.token_stride = row;
  rp.head_stride = kIndexHeadDim;
  rp.num_positions = p.num_positions;
  rp.style = p.style;
  DSA_RETURN_IF_ERROR(rope_ref(rp));
  const int64_t blocks = int64_t{p.num_tokens} * p.num_heads;  // <= INT32_MAX (validate)
  DSA_RETURN_IF_ERROR(hadamard_ref({q.data(), q.data(), static_cast<int32_t>(blocks)}));
  return indexer_q_quant_ref({q.data(), p.q8, p.w, blocks, p.fold});
}

}  // namespace dsa::kernels
