#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/linear/linear.h"

namespace dsa::kernels {

namespace {
constexpr int32_t kPoison = 0x7FFFFFFF;   // SPEC.md §1.2's int32 poison
constexpr uint16_t kPoisonBf16 = 0x7FC1;  // a NaN no rounding produces
constexpr int32_t kDistinctWeights = 8;   // W_g = matrix g % 8
}  // namespace

std::vector<int32_t> random_expert_ids(testing::Rng& rng, int32_t rows, int32_t experts, int32_t k,
                                       int32_t pad_every) {
  std::vector<int32_t> ids(size_t(rows) * k, -1);
  for (int32_t r = 0; r < rows; ++r) {
    if (pad_every > 0 && r % pad_every == pad_every - 1) continue;
    const std::vector<int32_t> perm = rng.permutation(0, experts);
    std::copy(perm.begin(), perm.begin() + k, ids.begin() + ptrdiff_t(r) * k);
  }
  return ids;
}

Grouping expected_grouping(const std::vector<int32_t>& ids, int32_t experts, int32_t k) {
  const int32_t S = static_cast<int32_t>(ids.size());
  std::vector<int32_t> slots;
  for (int32_t s = 0; s < S; ++s)
    if (ids[s] >= 0 && ids[s] < experts) slots.push_back(s);
  std::stable_sort(slots.begin(), slots.end(),
                   [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  Grouping g;
  g.offsets.resize(size_t(experts) + 1);
  for (int32_t e = 0; e <= experts; ++e) {
    g.offsets[e] =
        static_cast<int32_t>(std::lower_bound(slots.begin(), slots.end(), e,
                                              [&](int32_t s, int32_t v) { return ids[s] < v; }) -
                             slots.begin());
  }
  g.pair_row.assign(size_t(S), -1);
  g.pair_slot.assign(size_t(S), -1);
  for (size_t i = 0; i < slots.size(); ++i) {
    g.pair_row[i] = slots[i] / k;
    g.pair_slot[i] = slots[i];
  }
  return g;
}

Status check_moe_group(MoeGroupFn op, int32_t rows, int32_t experts, int32_t k, uint64_t seed) {
  if (rows < 0 || k < 1 || k > experts) {
    return invalid_argument(fmt::format(
        "check_moe_group: rows = {}, experts = {}, k = {}: need rows >= 0, 1 <= k <= experts", rows,
        experts, k));
  }
  testing::Rng rng(seed);
  const std::vector<int32_t> ids = random_expert_ids(rng, rows, experts, k, 5);
  const Grouping want = expected_grouping(ids, experts, k);
  const size_t S = ids.size();
  std::vector<int32_t> offsets(size_t(experts) + 1, kPoison), pair_row(S, kPoison),
      pair_slot(S, kPoison);
  MoeGroupParams p;
  p.expert_ids = ids.data();
  p.num_slots = static_cast<int32_t>(S);
  p.num_experts = experts;
  p.k = k;
  p.offsets = offsets.data();
  p.pair_row = pair_row.data();
  p.pair_slot = pair_slot.data();
  DSA_RETURN_IF_ERROR(op(p));
  for (int32_t e = 0; e <= experts; ++e) {
    if (offsets[e] != want.offsets[e]) {
      return internal_error(
          fmt::format("moe_group: offsets[{}] = {}, expected {}", e, offsets[e], want.offsets[e]));
    }
  }
  for (size_t i = 0; i < S; ++i) {
    if (pair_row[i] != want.pair_row[i] || pair_slot[i] != want.pair_slot[i]) {
      return internal_error(
          fmt::format("moe_group: pair {}: row {} slot {}, expected row {} slot {}", i, pair_row[i],
                      pair_slot[i], want.pair_row[i], want.pair_slot[i]));
    }
  }
  return ok_status();
}

Status check_grouped_linear(GroupedLinearFn op, int32_t rows, int32_t experts, int32_t k,
                            int32_t in_features, int32_t out_features, uint64_t seed) {
  if (rows < 1 || k < 1 || k > experts || in_features < 8 || in_features % 8 != 0 ||
      out_features < 1) {
    return invalid_argument(
        fmt::format("check_grouped_linear: rows = {}, experts = {}, k = {}, in = {}, out = {}",
                    rows, experts, k, in_features, out_features));
  }
  testing::Rng rng(seed);
  const size_t in = size_t(in_features), out = size_t(out_features);
  const std::vector<int32_t> ids = random_expert_ids(rng, rows, experts, k, 5);
  const Grouping grouping = expected_grouping(ids, experts, k);
  const std::vector<bf16> x = rng.bf16_vector(size_t(rows) * in);
  std::vector<std::vector<bf16>> w;
  for (int32_t m = 0; m < std::min(experts, kDistinctWeights); ++m)
    w.push_back(rng.bf16_vector(out * in, 1.f / std::sqrt(float(in_features))));
  std::vector<const bf16*> weights(static_cast<size_t>(experts));
  for (int32_t g = 0; g < experts; ++g) weights[g] = w[size_t(g % kDistinctWeights)].data();
  const int32_t S = rows * k;
  std::vector<bf16> y(size_t(S) * out, bf16{kPoisonBf16});

  GroupedLinearParams p;
  p.x = x.data();
  p.x_rows = rows;
  p.x_row = grouping.pair_row.data();
  p.weights = weights.data();
  p.offsets = grouping.offsets.data();
  p.num_groups = experts;
  p.capacity = S;
  p.in_features = in_features;
  p.out_features = out_features;
  p.y = y.data();
  p.y_rows = S;
  p.y_row = grouping.pair_slot.data();
  DSA_RETURN_IF_ERROR(op(p));

  for (int32_t s = 0; s < S; ++s) {
    const int32_t e = ids[s], r = s / k;
    const bf16* ys = &y[size_t(s) * out];
    for (size_t o = 0; o < out; ++o) {
      if (e < 0) {
        if (ys[o].bits != kPoisonBf16) {
          return internal_error(
              fmt::format("grouped_linear: y[{}][{}] = {} written, but slot {} is not dispatched",
                          s, o, bf16_to_float(ys[o]), s));
        }
        continue;
      }
      const bf16* wo = weights[e] + o * in;
      const bf16* xr = &x[size_t(r) * in];
      long double dot = 0;
      for (size_t c = 0; c < in; ++c)
        dot += (long double)bf16_to_float(xr[c]) * (long double)bf16_to_float(wo[c]);
      const bf16 want = double_to_bf16(static_cast<double>(dot));
      if (bf16_ulp_distance(ys[o], want) > 1) {
        return internal_error(fmt::format(
            "grouped_linear: y[{}][{}] = {}, expected {} (row {}, expert {}; 1 bf16 ulp allowed)",
            s, o, bf16_to_float(ys[o]), static_cast<double>(dot), r, e));
      }
    }
  }
  return ok_status();
}

namespace {

// One x row quantised per 128 columns by §2.1, by another route than the quantiser: the exponent
// of amax' / 448 from frexp (v = m 2^E, m in [0.5, 1): ceil(log2 v) = E - 1 when m = 0.5, else
// E). Returns the dequantised codes' e4m3 values q[j] and the block scales s[kb].
void quantise_row(const bf16* x, int32_t in, std::vector<float>& q, std::vector<float>& s) {
  const int32_t blocks = (in + kLinearBlock - 1) / kLinearBlock;
  q.resize(size_t(in));
  s.resize(size_t(blocks));
  for (int32_t b = 0; b < blocks; ++b) {
    const int32_t j0 = b * kLinearBlock, m = std::min(kLinearBlock, in - j0);
    float amax = 1e-4f;
    for (int32_t j = j0; j < j0 + m; ++j) amax = std::max(amax, std::fabs(bf16_to_float(x[j])));
    int e2 = 0;
    const float mant = std::frexp(amax / 448.0f, &e2);
    const int e = mant == 0.5f ? e2 - 1 : e2;
    s[size_t(b)] = std::ldexp(1.0f, e);
    for (int32_t j = j0; j < j0 + m; ++j) {
      const float v = std::clamp(std::ldexp(bf16_to_float(x[j]), -e), -448.f, 448.f);
      q[size_t(j)] = e4m3_to_float(float_to_e4m3(v));
    }
  }
}

}  // namespace

Status check_grouped_linear_fp8(GroupedLinearFn op, int32_t rows, int32_t experts, int32_t k,
                                int32_t in_features, int32_t out_features, uint64_t seed) {
  if (rows < 1 || k < 1 || k > experts || in_features < 16 || in_features % 16 != 0 ||
      out_features < 1) {
    return invalid_argument(
        fmt::format("check_grouped_linear_fp8: rows = {}, experts = {}, k = {}, in = {}, out = {}",
                    rows, experts, k, in_features, out_features));
  }
  testing::Rng rng(seed);
  const std::vector<int32_t> ids = random_expert_ids(rng, rows, experts, k, 5);
  const Grouping grouping = expected_grouping(ids, experts, k);
  const int32_t S = rows * k;
  Fp8GroupedProblem pr =
      make_fp8_grouped_problem(rng, std::vector<int32_t>(size_t(experts), 0), in_features,
                               out_features, rows, S, std::min(experts, kDistinctWeights));
  pr.offsets = grouping.offsets;
  pr.x_row = grouping.pair_row;
  pr.y_row = grouping.pair_slot;
  const size_t in = size_t(in_features), out = size_t(out_features);
  std::vector<bf16> y(size_t(S) * out, bf16{kPoisonBf16});
  DSA_RETURN_IF_ERROR(op(pr.params(y.data())));

  const int32_t blocks = (in_features + kLinearBlock - 1) / kLinearBlock;
  std::vector<float> q, sx;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t e = ids[size_t(s)], r = s / k;
    const bf16* ys = &y[size_t(s) * out];
    if (e < 0) {
      for (size_t o = 0; o < out; ++o) {
        if (ys[o].bits != kPoisonBf16) {
          return internal_error(fmt::format(
              "grouped_linear fp8: y[{}][{}] = {} written, but slot {} is not dispatched", s, o,
              bf16_to_float(ys[o]), s));
        }
      }
      continue;
    }
    quantise_row(&pr.x[size_t(r) * in], in_features, q, sx);
    const uint8_t* w8 = pr.weights_fp8[size_t(e)];
    const float* sw = pr.weight_scales[size_t(e)];
    for (size_t o = 0; o < out; ++o) {
      long double dot = 0;
      for (int32_t b = 0; b < blocks; ++b) {
        const size_t j0 = size_t(b) * kLinearBlock, j1 = std::min(in, j0 + kLinearBlock);
        long double part = 0;
        for (size_t j = j0; j < j1; ++j)
          part += (long double)q[j] * e4m3_to_float(e4m3{w8[o * in + j]});
        dot += part * sx[size_t(b)] * sw[(o / kLinearBlock) * size_t(blocks) + size_t(b)];
      }
      const bf16 want = double_to_bf16(static_cast<double>(dot));
      if (bf16_ulp_distance(ys[o], want) > 1) {
        return internal_error(fmt::format(
            "grouped_linear fp8: y[{}][{}] = {}, expected {} (row {}, expert {}; 1 bf16 ulp "
            "allowed)",
            s, o, bf16_to_float(ys[o]), static_cast<double>(dot), r, e));
      }
    }
  }
  return ok_status();
}

GroupedLinearParams Fp8GroupedProblem::params(bf16* y) {
  GroupedLinearParams p;
  p.x = x.data();
  p.x_rows = x_rows;
  p.x_row = x_row.data();
  p.weights_fp8 = weights_fp8.data();
  p.weight_scales = weight_scales.data();
  p.offsets = offsets.data();
  p.num_groups = groups();
  p.capacity = capacity;
  p.in_features = in;
  p.out_features = out;
  p.y = y;
  p.y_rows = y_rows;
  p.y_row = y_row.data();
  return p;
}

Fp8GroupedProblem make_fp8_grouped_problem(testing::Rng& rng, const std::vector<int32_t>& counts,
                                           int32_t in, int32_t out, int32_t x_rows, int32_t spare,
                                           int32_t distinct) {
  Fp8GroupedProblem pr;
  pr.in = in;
  pr.out = out;
  pr.x_rows = x_rows;
  pr.x.resize(size_t(x_rows) * in);
  for (int32_t t = 0; t < x_rows; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int32_t j = 0; j < in; ++j) pr.x[size_t(t) * in + j] = float_to_bf16(rng.normal() * scale);
  }
  const size_t blocks = size_t((out + 127) / 128) * size_t((in + 127) / 128);
  for (int32_t m = 0; m < distinct; ++m) {
    pr.w8.push_back(rng.e4m3_vector(size_t(out) * in, 100.f));
    std::vector<float> s(blocks);
    for (auto& v : s) v = rng.uniform(0.5f, 2.f) * 0x1p-9f;
    pr.sw.push_back(std::move(s));
  }
  pr.offsets.push_back(0);
  for (const int32_t c : counts) {
    const int32_t g = static_cast<int32_t>(pr.offsets.size()) - 1;
    pr.weights_fp8.push_back(pr.w8[size_t(g % distinct)].data());
    pr.weight_scales.push_back(pr.sw[size_t(g % distinct)].data());
    pr.offsets.push_back(pr.offsets.back() + c);
  }
  const int32_t pairs = pr.offsets.back();
  pr.capacity = pr.y_rows = pairs + spare;
  pr.x_row.resize(size_t(pr.capacity));
  for (auto& r : pr.x_row) r = static_cast<int32_t>(rng.randint(0, x_rows - 1));
  pr.y_row = rng.permutation(0, pr.y_rows);
  return pr;
}

std::vector<bf16> fp8_linear_row(const Fp8GroupedProblem& pr, int32_t g, int32_t i) {
  std::vector<bf16> row(size_t(pr.out));
  LinearParams lp;
  lp.x = &pr.x[size_t(pr.x_row[size_t(i)]) * pr.in];
  lp.weight_fp8 = pr.weights_fp8[size_t(g)];
  lp.weight_scale_inv = pr.weight_scales[size_t(g)];
  lp.y = row.data();
  lp.num_tokens = 1;
  lp.in_features = pr.in;
  lp.out_features = pr.out;
  if (!linear_ref(lp).ok()) return {};  // the caller's size check fails
  return row;
}

}  // namespace dsa::kernels
