#include <cmath>
#include <cstdint>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/linear/linear.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "linear";
constexpr int32_t kOutChunk = 64;  // outputs per task: parallel even when T = 1 (decode)

int32_t num_blocks(int32_t n) { return (n + kLinearBlock - 1) / kLinearBlock; }

Status check_data(const LinearParams& p) {
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    for (int32_t j = 0; j < p.in_features; ++j) {
      const float v = bf16_to_float(p.x[t * p.in_features + j]);
      if (!std::isfinite(v)) {
        return out_of_range(
            fmt::format("{}: x[{}][{}] = {}: must be finite (FP8 activation quantisation, §2.1)",
                        kOp, t, j, v));
      }
    }
  }
  const int64_t n = int64_t{num_blocks(p.out_features)} * num_blocks(p.in_features);
  for (int64_t k = 0; k < n; ++k) {
    if (!std::isfinite(p.weight_scale_inv[k])) {
      return out_of_range(fmt::format("{}: weight_scale_inv[{}] = {}: must be finite", kOp, k,
                                      p.weight_scale_inv[k]));
    }
  }
  return ok_status();
}

// x as the GEMM sees it, [T, in]: the bf16 upcast, or (FP8 weight) quantised per 128 columns and
// dequantised exactly (q * 2^e is exact in fp32).
std::vector<float> effective_x(const LinearParams& p) {
  std::vector<float> xs(size_t(p.num_tokens) * p.in_features);
  parallel_for(p.num_tokens, [&](int64_t t) {
    float* row = &xs[size_t(t) * p.in_features];
    for (int32_t j = 0; j < p.in_features; ++j) row[j] = bf16_to_float(p.x[t * p.in_features + j]);
    if (p.weight_fp8 == nullptr) return;
    uint8_t q[kLinearBlock];
    for (int32_t j0 = 0; j0 < p.in_features; j0 += kLinearBlock) {
      const int32_t m = std::min(kLinearBlock, p.in_features - j0);
      const float s = quantize_block_pow2(row + j0, m, q);
      for (int32_t j = 0; j < m; ++j) row[j0 + j] = e4m3_to_float(e4m3{q[j]}) * s;
    }
  });
  return xs;
}

// Weight row i dequantised exactly into double (e4m3 * fp32 scale needs 28 bits).
void weight_row(const LinearParams& p, int32_t i, const float* lut, double* w) {
  const int64_t base = int64_t{i} * p.in_features;
  if (p.weight != nullptr) {
    for (int32_t j = 0; j < p.in_features; ++j) w[j] = bf16_to_float(p.weight[base + j]);
    return;
  }
  const float* s = p.weight_scale_inv + int64_t{i / kLinearBlock} * num_blocks(p.in_features);
  for (int32_t j = 0; j < p.in_features; ++j)
    w[j] = double{lut[p.weight_fp8[base + j]]} * double{s[j / kLinearBlock]};
}

// Calls fn(t, i, dot, abs_dot) for every output, with dot = sum_j x^_j w^_j accumulated in double
// in one fixed order (four interleaved partial sums, then (s0 + s1) + (s2 + s3)).
template <typename Fn>
void for_each_output(const LinearParams& p, Fn fn) {
  const std::vector<float> xs = effective_x(p);
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = e4m3_to_float(e4m3{uint8_t(c)});
  const int64_t chunks = (p.out_features + kOutChunk - 1) / kOutChunk;
  parallel_for(int64_t{p.num_tokens} * chunks, [&](int64_t task) {
    const int64_t t = task / chunks;
    const int32_t i0 = int32_t(task % chunks) * kOutChunk;
    const float* x = &xs[size_t(t) * p.in_features];
    std::vector<double> w(size_t(p.in_features));
    for (int32_t i = i0; i < std::min(i0 + kOutChunk, p.out_features); ++i) {
      weight_row(p, i, lut, w.data());
      double s[4] = {0, 0, 0, 0}, a[4] = {0, 0, 0, 0};
      for (int32_t j = 0; j < p.in_features; ++j) {
        const double prod = double{x[j]} * w[j];  // exact
        s[j & 3] += prod;
        a[j & 3] += std::fabs(prod);
      }
      fn(t, i, (s[0] + s[1]) + (s[2] + s[3]), (a[0] + a[1]) + (a[2] + a[3]));
    }
  });
}
}  // namespace

Status validate(const LinearParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "in_features", p.in_features, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "out_features", p.out_features, 1, INT32_MAX));
  if ((p.weight == nullptr) == (p.weight_fp8 == nullptr)) {
    return invalid_argument(fmt::format("{}: weight and weight_fp8 are both {}: set exactly one",
                                        kOp, p.weight == nullptr ? "null" : "set"));
  }
  if (p.weight_fp8 != nullptr) {
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "weight_scale_inv", p.weight_scale_inv));
  } else if (p.weight_scale_inv != nullptr) {
    return invalid_argument(fmt::format(
        "{}: weight_scale_inv is set with a bf16 weight: only FP8 weights have one", kOp));
  }
  if ((p.y == nullptr) == (p.y_f32 == nullptr)) {
    return invalid_argument(fmt::format("{}: y and y_f32 are both {}: set exactly one", kOp,
                                        p.y == nullptr ? "null" : "set"));
  }
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "x", p.x));
  // Every path reads x while other outputs are written (threads, CTAs), so y may not alias it.
  const auto begin = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
  const uintptr_t x0 = begin(p.x),
                  x1 = x0 + size_t(p.num_tokens) * size_t(p.in_features) * sizeof(bf16);
  const uintptr_t y0 = p.y != nullptr ? begin(p.y) : begin(p.y_f32);
  const uintptr_t y1 = y0 + size_t(p.num_tokens) * size_t(p.out_features) *
                                (p.y != nullptr ? sizeof(bf16) : sizeof(float));
  if (x0 < y1 && y0 < x1) {
    return invalid_argument(fmt::format("{}: the output overlaps x: they must be separate", kOp));
  }
  return ok_status();
}

Status linear_ref(const LinearParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.weight_fp8 != nullptr && checked_mode()) DSA_RETURN_IF_ERROR(check_data(p));
  for_each_output(p, [&](int64_t t, int32_t i, double dot, double) {
    const int64_t k = t * p.out_features + i;
    if (p.y != nullptr) {
      p.y[k] = double_to_bf16(dot);
    } else {
      p.y_f32[k] = static_cast<float>(dot);
    }
  });
  return ok_status();
}

double linear_tolerance(bool fp8_weight, double abs_dot, double ref) {
  return (fp8_weight ? 0x1p-8 : 0x1p-12) * abs_dot + 0x1p-7 * std::fabs(ref);
}

Status linear_tolerance_bounds(const LinearParams& p, const float* ref, float* bound) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "ref", ref));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "bound", bound));
  const bool fp8 = p.weight_fp8 != nullptr;
  for_each_output(p, [&](int64_t t, int32_t i, double, double abs_dot) {
    const int64_t k = t * p.out_features + i;
    bound[k] = static_cast<float>(linear_tolerance(fp8, abs_dot, ref[k]));
  });
  return ok_status();
}

}  // namespace dsa::kernels
