#include "dsa/kernels/sparse_mla/sparse_mla_row.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/validate.h"

namespace dsa::kernels::sparse_mla_detail {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// Number of leading index entries row r may use: topk_len clamped into [0, K] (checked mode has
// already rejected values outside it).
int32_t row_length(const RowBatch& b, int32_t r) {
  if (b.topk_len == nullptr) return b.topk;
  return std::clamp(b.topk_len[r], 0, b.topk);
}

// The attended set A_r in list order, as exact float rows [n, 576]; repeats stay repeated.
std::vector<float> gather_row(const RowBatch& b, const KeySpace& keys, int32_t r) {
  std::vector<float> kv;
  const int32_t* idx = b.indices + int64_t{r} * b.topk;
  for (int32_t i = 0; i < row_length(b, r); ++i) {
    if (!keys.valid(idx[i])) continue;  // -1, and (unchecked) out-of-contract indices
    kv.resize(kv.size() + kQkDim);
    keys.load(idx[i], kv.data() + kv.size() - kQkDim);
  }
  return kv;
}

// One row, all heads: the formulas of §3f in double, in list order.
void attend_row(const RowBatch& b, int32_t r, const std::vector<float>& kv) {
  const int64_t n = static_cast<int64_t>(kv.size()) / kQkDim;
  std::vector<double> z(n), acc(kVDim);
  for (int32_t h = 0; h < b.heads; ++h) {
    const int64_t rh = int64_t{r} * b.heads + h;
    const bf16* q = b.q + rh * kQkDim;
    bf16* out = b.out + rh * kVDim;
    if (n == 0) {  // empty A_r: out = 0, lse = +inf exactly
      std::fill(out, out + kVDim, float_to_bf16(0.f));
      b.lse[rh] = static_cast<float>(kInf);
      if (b.max_logit) b.max_logit[rh] = static_cast<float>(-kInf);
      continue;
    }
    double qd[kQkDim];
    for (int t = 0; t < kQkDim; ++t) qd[t] = bf16_to_float(q[t]);
    double zmax = -kInf;
    for (int64_t i = 0; i < n; ++i) {
      const float* k = kv.data() + i * kQkDim;
      double dot = 0;
      for (int t = 0; t < kQkDim; ++t) dot += qd[t] * k[t];
      z[i] = double{b.sm_scale} * dot;
      zmax = std::max(zmax, z[i]);
    }
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(z[i] - zmax);
    const double lse = zmax + std::log(sum);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double w = std::exp(z[i] - lse);
      const float* k = kv.data() + i * kQkDim;
      for (int c = 0; c < kVDim; ++c) acc[c] += w * k[c];
    }
    for (int c = 0; c < kVDim; ++c) out[c] = double_to_bf16(acc[c]);
    b.lse[rh] = static_cast<float>(lse);
    if (b.max_logit) b.max_logit[rh] = static_cast<float>(zmax);
  }
}

// §3f tolerance of row r, given its (already written) reference outputs.
void bound_row(const RowBatch& b, int32_t r, const std::vector<float>& kv, SparseMlaBounds& out) {
  const int64_t n = static_cast<int64_t>(kv.size()) / kQkDim;
  double v_r = 0;  // V_r = max |kv_i[c]|, c < 512
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < kVDim; ++c) v_r = std::max(v_r, std::fabs(double{kv[i * kQkDim + c]}));
  for (int32_t h = 0; h < b.heads; ++h) {
    const int64_t rh = int64_t{r} * b.heads + h;
    const bf16* q = b.q + rh * kQkDim;
    double abs_dot_max = 0;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int t = 0; t < kQkDim; ++t)
        s += std::fabs(double{bf16_to_float(q[t])} * kv[i * kQkDim + t]);
      abs_dot_max = std::max(abs_dot_max, s);
    }
    const double eps_z = std::ldexp(double{b.sm_scale} * abs_dot_max, -16);
    for (int c = 0; c < kVDim; ++c) {
      double ref = std::fabs(double{bf16_to_float(b.out[rh * kVDim + c])});
      out.out[rh * kVDim + c] =
          n == 0 ? 0.f
                 : static_cast<float>(std::ldexp(ref, -7) + std::ldexp(v_r, -8) + eps_z * v_r);
    }
    double lse = std::fabs(double{b.lse[rh]});
    out.lse[rh] = n == 0 ? 0.f : static_cast<float>(1e-4 * std::max(1.0, lse) + eps_z);
  }
}
}  // namespace

bf16 double_to_bf16(double x) {
  const float f = static_cast<float>(x);  // RNE to fp32
  const uint32_t u = float_bits(f);
  // Double rounding can only go wrong when f sits exactly halfway between two bf16 values while
  // x does not: then x decides the direction, never the tie-to-even rule.
  if (!std::isfinite(f) || (u & 0xFFFFu) != 0x8000u || double{f} == x) return float_to_bf16(f);
  const uint16_t toward_zero = static_cast<uint16_t>(u >> 16);
  return bf16{
      static_cast<uint16_t>(std::fabs(x) > std::fabs(double{f}) ? toward_zero + 1 : toward_zero)};
}

Status validate_batch(const RowBatch& b) {
  DSA_RETURN_IF_ERROR(require_in(b.op, "rows", b.rows, 0, INT32_MAX));
  if (b.heads != 16 && b.heads != 32 && b.heads != 64 && b.heads != 128) {
    return field_error(StatusCode::kInvalidArgument, b.op, "num_heads", b.heads,
                       "must be 16, 32, 64 or 128");
  }
  if (b.topk < 64 || b.topk > kMaxTopk || b.topk % 64 != 0) {
    return field_error(StatusCode::kInvalidArgument, b.op, "topk", b.topk,
                       "must be a multiple of 64 in [64, 2048]");
  }
  if (!std::isfinite(b.sm_scale) || !(b.sm_scale > 0.f)) {
    return invalid_argument(
        fmt::format("{}: sm_scale = {}: must be finite and > 0", b.op, b.sm_scale));
  }
  if (b.rows == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(b.op, "q", b.q));
  DSA_RETURN_IF_ERROR(require_pointer(b.op, "indices", b.indices));
  DSA_RETURN_IF_ERROR(require_pointer(b.op, "out", b.out));
  return require_pointer(b.op, "lse", b.lse);
}

Status check_batch_data(const RowBatch& b, const KeySpace& keys) {
  for (int32_t r = 0; r < b.rows; ++r) {
    int32_t len = b.topk;
    if (b.topk_len != nullptr) {
      len = b.topk_len[r];
      if (len < 0 || len > b.topk) {
        return element_error(StatusCode::kOutOfRange, b.op, "topk_len", r, len,
                             fmt::format("must be in [0, K = {}]", b.topk));
      }
    }
    const int32_t* idx = b.indices + int64_t{r} * b.topk;
    for (int32_t i = 0; i < len; ++i) {
      if (idx[i] == -1 || keys.valid(idx[i])) continue;
      return out_of_range(fmt::format("{}: indices[{}][{}] = {}: must be -1 or in {}", b.op, r, i,
                                      idx[i], keys.rule));
    }
  }
  return ok_status();
}

void run_batch(const RowBatch& b, const KeySpace& keys, SparseMlaBounds* bounds) {
  if (bounds != nullptr) {
    bounds->out.assign(size_t(b.rows) * b.heads * kVDim, 0.f);
    bounds->lse.assign(size_t(b.rows) * b.heads, 0.f);
  }
  parallel_for(b.rows, [&](int64_t r64) {
    const int32_t r = static_cast<int32_t>(r64);
    std::vector<float> kv = gather_row(b, keys, r);
    attend_row(b, r, kv);
    if (bounds != nullptr) bound_row(b, r, kv, *bounds);
  });
}

}  // namespace dsa::kernels::sparse_mla_detail
