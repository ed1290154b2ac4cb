#include "dsa/kernels/linear/linear_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
struct Problem {
  int32_t tokens, in, out;
  bool fp8;
  std::vector<bf16> x, w;
  std::vector<uint8_t> w8;
  std::vector<float> sw;
};

// Independent activation quantisation of one block: scale 2^e with e from frexp of amax / 448.
float block_scale(const bf16* x, int32_t m) {
  float amax = 1e-4f;
  for (int32_t j = 0; j < m; ++j) amax = std::max(amax, std::fabs(bf16_to_float(x[j])));
  int exp2;
  const float mant = std::frexp(amax / 448.0f, &exp2);  // = mant * 2^exp2, mant in [0.5, 1)
  return std::ldexp(1.0f, mant == 0.5f ? exp2 - 1 : exp2);
}

// y[t][i] and M[t][i] in long double: bf16 weight by transposed loops; FP8 by the block formula.
void expected(const Problem& pr, std::vector<long double>& y, std::vector<long double>& m) {
  const int32_t kb = (pr.in + kLinearBlock - 1) / kLinearBlock;
  y.assign(size_t(pr.tokens) * pr.out, 0);
  m.assign(y.size(), 0);
  for (int32_t t = 0; t < pr.tokens; ++t) {
    const bf16* x = &pr.x[size_t(t) * pr.in];
    long double* yt = &y[size_t(t) * pr.out];
    long double* mt = &m[size_t(t) * pr.out];
    if (!pr.fp8) {
      for (int32_t j = 0; j < pr.in; ++j) {
        const long double xj = bf16_to_float(x[j]);
        for (int32_t i = 0; i < pr.out; ++i) {
          const long double prod = xj * bf16_to_float(pr.w[size_t(i) * pr.in + j]);
          yt[i] += prod;
          mt[i] += std::fabs(prod);
        }
      }
      continue;
    }
    for (int32_t k = 0; k < kb; ++k) {
      const int32_t j0 = k * kLinearBlock, len = std::min(kLinearBlock, pr.in - j0);
      const float sx = block_scale(x + j0, len);
      for (int32_t i = 0; i < pr.out; ++i) {
        const long double sw = pr.sw[size_t(i / kLinearBlock) * kb + k];
        long double dot = 0, adot = 0;
        for (int32_t j = j0; j < j0 + len; ++j) {
          const float x8 = e4m3_to_float(float_to_e4m3(bf16_to_float(x[j]) / sx));
          const long double prod =
              x8 * (long double)e4m3_to_float(e4m3{pr.w8[size_t(i) * pr.in + j]});
          dot += prod;
          adot += std::fabs(prod);
        }
        yt[i] += sx * sw * dot;
        mt[i] += sx * std::fabs(sw) * adot;
      }
    }
  }
}
}  // namespace

Status check_linear(LinearFn op, int32_t tokens, int32_t in_features, int32_t out_features,
                    bool fp8_weight, uint64_t seed) {
  if (tokens < 1 || in_features < 1 || out_features < 1) {
    return invalid_argument(fmt::format(
        "check_linear: tokens = {}, in_features = {}, out_features = {}: all must be >= 1", tokens,
        in_features, out_features));
  }
  testing::Rng rng(seed);
  Problem pr{tokens, in_features, out_features, fp8_weight, {}, {}, {}, {}};
  pr.x.resize(size_t(tokens) * in_features);
  for (int32_t t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int32_t j = 0; j < in_features; ++j)
      pr.x[size_t(t) * in_features + j] = float_to_bf16(rng.normal() * scale);
  }
  const size_t wn = size_t(out_features) * in_features;
  const int32_t ob = (out_features + 127) / 128, ib = (in_features + 127) / 128;
  if (fp8_weight) {
    pr.w8 = rng.e4m3_vector(wn, 100.f);
    pr.sw.resize(size_t(ob) * ib);
    for (auto& s : pr.sw) s = rng.uniform(0.5f, 2.f) * 0x1p-9f;  // like V3's, not powers of two
  } else {
    pr.w = rng.bf16_vector(wn, 0.05f);
  }
  std::vector<long double> want, m;
  expected(pr, want, m);

  for (bool f32_out : {false, true}) {
    std::vector<bf16> y(size_t(tokens) * out_features, float_to_bf16(NAN));
    std::vector<float> y32(y.size(), NAN);
    LinearParams p;
    p.x = pr.x.data();
    p.weight = fp8_weight ? nullptr : pr.w.data();
    p.weight_fp8 = fp8_weight ? pr.w8.data() : nullptr;
    p.weight_scale_inv = fp8_weight ? pr.sw.data() : nullptr;
    p.y = f32_out ? nullptr : y.data();
    p.y_f32 = f32_out ? y32.data() : nullptr;
    p.num_tokens = tokens;
    p.in_features = in_features;
    p.out_features = out_features;
    DSA_RETURN_IF_ERROR(op(p));
    for (size_t k = 0; k < y.size(); ++k) {
      const double ref = static_cast<double>(want[k]);
      bool ok;
      double got;
      if (f32_out) {
        got = y32[k];
        ok = std::fabs(got - ref) <= 0x1p-22 * std::fabs(ref) + 0x1p-40 * double(m[k]);
      } else {
        got = bf16_to_float(y[k]);
        ok = bf16_ulp_distance(y[k], double_to_bf16(ref)) <= 1;
      }
      if (!ok) {
        return internal_error(fmt::format("linear ({} weight, {} out): y[{}][{}] = {}, expected {}",
                                          fp8_weight ? "fp8" : "bf16", f32_out ? "fp32" : "bf16",
                                          k / out_features, k % out_features, got, ref));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
