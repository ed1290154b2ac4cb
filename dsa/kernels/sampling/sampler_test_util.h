// Helpers shared by the sampler tests: Pearson's chi-square goodness-of-fit test with a critical
// value from the Wilson–Hilferty approximation, and a small deterministic hash for synthetic
// logits.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsa::kernels::sampler_test {

// z with P(N(0,1) > z) = alpha, by bisection on erfc (alpha = 1e-6 gives z = 4.7534243).
inline double normal_upper_quantile(double alpha) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(mid / std::sqrt(2.0)) > alpha ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Wilson–Hilferty: (X / k)^(1/3) is close to N(1 - 2/(9k), 2/(9k)), so the upper-alpha quantile of
// chi-square with k degrees of freedom is k (1 - 2/(9k) + z sqrt(2/(9k)))^3. At alpha = 1e-6 it
// errs on the conservative side: k = 1 -> 27.50 (exact 23.93), k = 5 -> 37.51 (35.89),
// k = 10 -> 47.96 (46.86), k = 63 -> 131.75 (131.37).
inline double chi_square_critical(int dof, double alpha) {
  const double k = dof, z = normal_upper_quantile(alpha), c = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - c + z * std::sqrt(c), 3.0);
}

inline constexpr double kAlpha = 1e-6;  // SPEC.md §6.6

struct ChiSquare {
  double statistic = 0;
  int dof = 0;
  double critical = 0;
  int64_t outside_support = 0;  // samples where the expected probability is 0
  std::string report;
  bool pass() const { return outside_support == 0 && dof > 0 && statistic <= critical; }
};

// counts[v] observed, probs[v] expected (summing to 1). Bins expected below 5 are pooled into one.
inline ChiSquare chi_square(std::span<const int64_t> counts, std::span<const double> probs) {
  ChiSquare r;
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double pooled_expected = 0, pooled_observed = 0;
  int bins = 0;
  for (size_t v = 0; v < counts.size(); ++v) {
    if (probs[v] == 0) {
      r.outside_support += counts[v];
      continue;
    }
    const double e = probs[v] * static_cast<double>(n);
    if (e < 5) {
      pooled_expected += e;
      pooled_observed += static_cast<double>(counts[v]);
      continue;
    }
    r.statistic += (static_cast<double>(counts[v]) - e) * (static_cast<double>(counts[v]) - e) / e;
    ++bins;
  }
  if (pooled_expected >= 5) {
    r.statistic +=
        (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  r.dof = bins - 1;
  r.critical = r.dof > 0 ? chi_square_critical(r.dof, kAlpha) : 0;
  r.report = fmt::format(
      "chi2 = {:.2f}, dof = {}, critical (alpha = 1e-6) = {:.2f}, n = {}, "
      "samples outside the support = {}",
      r.statistic, r.dof, r.critical, n, r.outside_support);
  return r;
}

// splitmix64: a deterministic hash for synthetic 'models' and inputs.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform float in [-1, 1) from a hash.
inline float hash_unit(uint64_t h) {
  return static_cast<float>(static_cast<double>(mix64(h) >> 11) * 0x1p-52 - 1.0);
}

// Fixed Philox seeds and draws per seed of the distribution tests (deterministic chi-square).
inline constexpr uint64_t kSeeds[] = {0x0123456789ABCDEFull, 42, 0xFFFFFFFFFFFFFFFFull,
                                      0x9E3779B97F4A7C15ull};
inline constexpr int64_t kDrawsPerSeed = 50000;

// 16 synthetic logits with a spread of probabilities (largest ~0.3, smallest ~0.003 at T = 1).
inline std::vector<float> synthetic_logits(uint64_t salt) {
  std::vector<float> l(16);
  for (size_t v = 0; v < l.size(); ++v) l[v] = 2.f * hash_unit(salt * 131 + v);
  return l;
}

}  // namespace dsa::kernels::sampler_test
