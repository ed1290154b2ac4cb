// The test-only oracle (sampler_oracle.h) against hand-computed distributions, then the sampler's
// own sampling_distribution() against the oracle over many random small rows: ties, NaN, +-inf,
// every temperature / top-k / top-p regime. The chi-square tests trust the oracle, so it is checked
// here by numbers worked out on paper, not by the sampler.
#include "dsa/kernels/sampling/sampler_oracle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>
#include <vector>

#include "dsa/kernels/sampling/sampler.h"
#include "dsa/kernels/sampling/sampler_test_util.h"

namespace dsa::kernels {
namespace {

using sampler_test::hash_unit;
using sampler_test::mix64;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

SamplingParams params(float t, int32_t top_k = 0, float top_p = 1.f) {
  return SamplingParams{.temperature = t, .top_p = top_p, .top_k = top_k};
}

void expect_oracle(const std::vector<float>& logits, const SamplingParams& p,
                   const std::vector<double>& want) {
  const std::vector<double> pi = sampler_oracle::distribution(logits, p);
  ASSERT_EQ(pi.size(), want.size());
  for (size_t v = 0; v < want.size(); ++v) {
    EXPECT_NEAR(pi[v], want[v], 1e-15) << "oracle pi[" << v << "]";
    if (want[v] == 0) EXPECT_EQ(pi[v], 0.0) << "token " << v << " must be out";
  }
}

// ---- the oracle against paper
// --------------------------------------------------------------------

TEST(SamplerOracle, SoftmaxAndTemperature) {
  // e^0 : e^ln 3 = 1 : 3 (ln 3 rounded to fp32, so 3 up to 1e-7).
  const float ln3 = float(std::log(3.0));
  const double w = std::exp(double(ln3));
  EXPECT_NEAR(w, 3.0, 1e-6);
  expect_oracle({0.f, ln3}, params(1.f), {1 / (1 + w), w / (1 + w)});
  // T = 2 halves the scaled logits: {0, ln 4} -> {0, ln 2}, so 1 : 2 (ln 4 rounded to fp32).
  const float ln4 = float(std::log(4.0));
  const double r = std::exp(double(ln4) / 2.0);
  EXPECT_NEAR(r, 2.0, 1e-6);
  expect_oracle({0.f, ln4}, params(2.f), {1 / (1 + r), r / (1 + r)});
}

TEST(SamplerOracle, GreedyTiesToTheLowerIdAndSkipsNanAndMinusInf) {
  expect_oracle({1.f, 3.f, 3.f, 2.f}, params(0.f), {0, 1, 0, 0});
  expect_oracle({kNan, -kInf, -5.f}, params(0.f), {0, 0, 1});
  expect_oracle({-kInf, 1.f, kInf, kInf}, params(0.f), {0, 0, 1, 0});
  expect_oracle({kNan, -kInf}, params(0.f), {0, 0});
  // Filters do not apply at temperature 0.
  expect_oracle({1.f, 3.f}, params(0.f, 1, 0.05f), {0, 1});
}

TEST(SamplerOracle, TopKKeepsTheLowerIdsOfATie) {
  // Sorted: 2 (id 1), 2 (id 3), 1 (id 0), 1 (id 2); k = 3 keeps ids 1, 3 and 0.
  const double e = std::exp(1.0);
  expect_oracle({1.f, 2.f, 1.f, 2.f}, params(1.f, 3),
                {1 / (2 * e + 1), e / (2 * e + 1), 0, e / (2 * e + 1)});
  expect_oracle({1.f, 2.f, 1.f, 2.f}, params(1.f, 1), {0, 1, 0, 0});
  // k >= the eligible count keeps them all.
  expect_oracle({0.f, 0.f, kNan}, params(1.f, 2), {0.5, 0.5, 0});
}

TEST(SamplerOracle, TopPIsTheShortestPrefixReachingTheMass) {
  // Weights ~1 : 2 : 3 : 4, so pi ~ {0.1, 0.2, 0.3, 0.4}; top-p 0.5: 0.4 < 0.5 <= 0.4 + 0.3, so
  // ids 3 and 2 stay, renormalised between themselves.
  const std::vector<float> l = {0.f, float(std::log(2.0)), float(std::log(3.0)),
                                float(std::log(4.0))};
  const double w2 = std::exp(double(l[2]) - double(l[3])), w3 = 1.0;
  expect_oracle(l, params(1.f, 0, 0.5f), {0, 0, w2 / (w2 + w3), w3 / (w2 + w3)});
  // top-p small enough that the first token alone reaches it.
  expect_oracle(l, params(1.f, 0, 0.05f), {0, 0, 0, 1});
  // Exactly reaching the mass stops there: four equal tokens, 0.25 + 0.25 = 0.5.
  expect_oracle({0.f, 0.f, 0.f, 0.f}, params(1.f, 0, 0.5f), {0.5, 0.5, 0, 0});
}

TEST(SamplerOracle, TopPRenormalisesAfterTopK) {
  // After k = 2 the survivors are ids 3 and 2 with mass 4/7 and 3/7; top-p 0.55 keeps only id 3
  // (4/7 = 0.571 >= 0.55), where the mass before top-k (0.4) would have needed two tokens.
  const std::vector<float> l = {0.f, float(std::log(2.0)), float(std::log(3.0)),
                                float(std::log(4.0))};
  expect_oracle(l, params(1.f, 2, 0.55f), {0, 0, 0, 1});
}

TEST(SamplerOracle, PlusInfinityIsUniformOverTheInfiniteLogits) {
  expect_oracle({kInf, 5.f, kInf, kNan, -kInf, kInf}, params(1.f),
                {1.0 / 3, 0, 1.0 / 3, 0, 0, 1.0 / 3});
  // The filters then act on that uniform distribution, ties to the lower ids.
  expect_oracle({kInf, 5.f, kInf, kInf}, params(0.3f, 2), {0.5, 0, 0.5, 0});
  expect_oracle({kInf, 5.f, kInf, kInf}, params(2.5f, 0, 0.5f), {0.5, 0, 0.5, 0});
}

TEST(SamplerOracle, NothingEligibleGivesZeros) {
  expect_oracle({kNan, -kInf, kNan}, params(1.f, 2, 0.9f), {0, 0, 0});
  expect_oracle({}, params(1.f), {});
}

// ---- sampling_distribution() against the oracle ------------------------------------------------

// A random row of length V: mostly finite values, with ties drawn from a small set, and NaN, +inf,
// -inf and extreme magnitudes mixed in at varying rates (some rows all ties, some all ineligible).
std::vector<float> random_row(uint64_t row, int32_t V) {
  const uint64_t kind = mix64(row * 7 + 1) % 8;
  std::vector<float> l(static_cast<size_t>(V));
  const float tied[] = {-1.f, 0.f, 0.5f, 2.f};
  for (int32_t v = 0; v < V; ++v) {
    const uint64_t h = mix64(row * 1000003 + uint64_t(v));
    const uint64_t pick = h % 100;
    float x = 4.f * hash_unit(h);
    if (kind == 0) {
      x = tied[h % 2];  // only two values: long ties at every cut
    } else if (kind == 1) {
      x = pick < 50 ? kNan : -kInf;  // nothing eligible
    } else if (kind == 2 && pick < 30) {
      x = kInf;
    } else if (pick < 25) {
      x = tied[(h >> 8) % 4];
    } else if (pick < 30) {
      x = kNan;
    } else if (pick < 35) {
      x = -kInf;
    } else if (pick < 37) {
      x = kInf;
    } else if (pick < 39) {
      x = (h & 256) ? 3e38f : -3e38f;  // the scaled logits stay finite in fp64
    }
    l[size_t(v)] = x;
  }
  return l;
}

// Tokens a sampled (T > 0) row may draw before top-k / top-p: the +inf ones if any, else the
// finite.
int eligible_count(const std::vector<float>& l) {
  int finite = 0, pos_inf = 0;
  for (float x : l) {
    finite += std::isfinite(x);
    pos_inf += x == kInf;
  }
  return pos_inf > 0 ? pos_inf : finite;
}

std::string describe(const std::vector<float>& l, const SamplingParams& p) {
  std::ostringstream s;
  s << "T = " << p.temperature << ", top_k = " << p.top_k << ", top_p = " << p.top_p
    << ", logits =";
  for (float x : l) s << " " << x;
  return s.str();
}

TEST(SamplerOracle, SamplingDistributionEqualsTheOracleOnRandomRows) {
  constexpr int kRows = 2000;
  int64_t compared = 0, rows_with_cut = 0;
  for (uint64_t row = 0; row < kRows; ++row) {
    const int32_t V = 1 + int32_t(mix64(row) % 40);
    const std::vector<float> l = random_row(row, V);
    for (float t : {0.f, 0.3f, 1.f, 2.5f}) {
      for (int32_t k : {0, 1, 3, V - 1, V, V + 5}) {
        if (k < 0) continue;  // V - 1 when V = 1 is 0: already covered
        for (float top_p : {0.05f, 0.5f, 0.9f, 1.f}) {
          const SamplingParams p = params(t, k, top_p);
          const std::vector<double> want = sampler_oracle::distribution(l, p);
          const std::vector<double> got = sampling_distribution(l, p);
          ASSERT_EQ(got.size(), want.size());
          int kept = 0;
          for (size_t v = 0; v < want.size(); ++v) {
            ASSERT_NEAR(got[v], want[v], 1e-12) << "pi[" << v << "], " << describe(l, p);
            ASSERT_EQ(got[v] > 0, want[v] > 0) << "support at " << v << ", " << describe(l, p);
            kept += want[v] > 0;
          }
          rows_with_cut += t > 0 && kept > 0 && kept < eligible_count(l);
          ++compared;
        }
      }
    }
  }
  // The rows must actually exercise top-k and top-p, not only pass through them.
  EXPECT_GT(rows_with_cut, compared / 4) << rows_with_cut << " of " << compared;
  std::cout << compared << " (row, params) pairs compared, " << rows_with_cut
            << " with top-k or top-p cutting the support\n";
}

}  // namespace
}  // namespace dsa::kernels
