#include "dsa/kernels/sampling/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dsa/kernels/common/philox.h"

namespace dsa::kernels {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_position(int64_t position) {
  DSA_CHECK(position >= 0 && position <= std::numeric_limits<int32_t>::max());
}

// Noise for tokens visited in any order; one Philox call serves the four tokens of a group, so a
// pass in id order costs V / 4 calls.
class GumbelStream {
 public:
  GumbelStream(uint64_t seed, int64_t position)
      : key_(philox_key(seed)), position_(static_cast<uint32_t>(position)) {}
  float operator()(int32_t token) {
    const uint32_t group = static_cast<uint32_t>(token) >> 2;
    if (group != group_) {
      words_ = philox4x32_10(sampling_counter(group, position_), key_);
      group_ = group;
    }
    return gumbel_from_uniform(uniform_from_word(words_.w[token & 3]));
  }

 private:
  PhiloxKey key_;
  uint32_t position_;
  uint32_t group_ = std::numeric_limits<uint32_t>::max();  // no token has this group
  PhiloxCounter words_{};
};

// Argmax of scores offered in any order, ties to the lowest id.
struct Best {
  int32_t token = kNoToken;
  double score = -kInf;
  void offer(int32_t v, double s) {
    if (token == kNoToken || s > score || (s == score && v < token)) {
      token = v;
      score = s;
    }
  }
};

// The extreme values of gamma: at U = 2^-24 and U = 1 - 2^-24, the ends of §6.3's U.
double gumbel_min() {
  static const double g = gumbel_from_uniform(uniform_from_word(0u));
  return g;
}
double gumbel_max() {
  static const double g = gumbel_from_uniform(uniform_from_word(0xFFFFFFFFu));
  return g;
}

bool filters_off(const SamplingParams& p, size_t vocab) {
  return (p.top_k == 0 || static_cast<size_t>(p.top_k) >= vocab) && p.top_p >= 1.f;
}

// Temperature scaling in fp64 (never overflows). Ineligible tokens (NaN, -inf, or finite when some
// logit is +inf) map to -inf; with a +inf logit present the +inf tokens map to 0 (uniform).
class Scaler {
 public:
  Scaler(std::span<const float> logits, float temperature) : t_(temperature) {
    for (float x : logits) pos_inf_ |= x == kInf;
  }
  double operator()(float x) const {
    if (std::isnan(x) || x == -kInf || (pos_inf_ && x != kInf)) return -kInf;
    return pos_inf_ ? 0.0 : static_cast<double>(x) / t_;
  }

 private:
  double t_;
  bool pos_inf_ = false;
};

// The kept tokens after temperature, top-k and top-p, with their scaled logits.
struct Kept {
  std::vector<int32_t> ids;    // any order
  std::vector<double> scaled;  // [V], valid at ids
  double max_scaled = -kInf;   // over ids
};

// top-p on the candidates k.ids (the top-k set, or every eligible token) given in id order:
// probabilities in fp64 with the normaliser summed in id order; keep the smallest prefix of the
// descending order whose mass reaches top_p (all of it if rounding leaves the total just below).
// The descending order is built lazily, 64 then doubling, since the prefix is usually short.
template <typename Before>
void keep_top_p(Kept& k, float top_p, Before before) {
  std::vector<double> w(k.scaled.size());
  double z = 0;
  for (int32_t v : k.ids) z += (w[size_t(v)] = std::exp(k.scaled[size_t(v)] - k.max_scaled));
  double mass = 0;
  for (size_t sorted = 0; sorted < k.ids.size();) {
    const size_t upto = std::min(k.ids.size(), std::max(2 * sorted, sorted + 64));
    const auto first = k.ids.begin() + ptrdiff_t(sorted), mid = k.ids.begin() + ptrdiff_t(upto);
    std::nth_element(first, mid - 1, k.ids.end(), before);
    std::sort(first, mid - 1, before);  // nth_element already put *(mid - 1) in place
    for (; sorted < upto; ++sorted) {
      mass += w[size_t(k.ids[sorted])] / z;
      if (mass >= static_cast<double>(top_p)) {
        k.ids.resize(sorted + 1);
        return;
      }
    }
  }
}

Kept filter(std::span<const float> logits, const SamplingParams& p) {
  const auto vocab = static_cast<int32_t>(logits.size());
  const Scaler scale(logits, p.temperature);
  Kept k;
  k.scaled.resize(logits.size());
  for (int32_t v = 0; v < vocab; ++v) {
    const double s = k.scaled[size_t(v)] = scale(logits[size_t(v)]);
    if (s == -kInf) continue;
    k.ids.push_back(v);
    k.max_scaled = std::max(k.max_scaled, s);
  }
  const auto n = static_cast<int64_t>(k.ids.size());
  // Descending scaled logit, ties by lower id: a strict total order, so the result is unique.
  const auto before = [&s = k.scaled](int32_t a, int32_t b) {
    return s[size_t(a)] > s[size_t(b)] || (s[size_t(a)] == s[size_t(b)] && a < b);
  };
  if (p.top_k > 0 && p.top_k < n) {
    std::nth_element(k.ids.begin(), k.ids.begin() + (p.top_k - 1), k.ids.end(), before);
    k.ids.resize(size_t(p.top_k));
    std::sort(k.ids.begin(), k.ids.end());  // back to id order for top-p's sum
  }
  if (p.top_p < 1.f && !k.ids.empty()) keep_top_p(k, p.top_p, before);
  return k;
}

}  // namespace

// Greedy: strict '>' keeps the lowest id on ties; NaN and -inf never compare greater than -inf.
int32_t argmax_token(std::span<const float> logits) {
  int32_t best = kNoToken;
  float best_value = -std::numeric_limits<float>::infinity();
  for (size_t v = 0; v < logits.size(); ++v) {
    if (logits[v] > best_value) {
      best_value = logits[v];
      best = static_cast<int32_t>(v);
    }
  }
  return best;
}

Status validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature)) {
    return invalid_argument(fmt::format("temperature = {}: must be finite", p.temperature));
  }
  if (p.temperature < 0.f) {
    return invalid_argument(fmt::format("temperature = {}: must be >= 0", p.temperature));
  }
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) {
    return invalid_argument(fmt::format("top_p = {}: must be in (0, 1]", p.top_p));
  }
  if (p.top_k < 0) {
    return invalid_argument(fmt::format("top_k = {}: must be >= 0 (0 = off)", p.top_k));
  }
  return ok_status();
}

float uniform_noise(uint64_t seed, int64_t position, int32_t token) {
  check_position(position);
  DSA_CHECK(token >= 0);
  const PhiloxCounter c =
      sampling_counter(static_cast<uint32_t>(token) >> 2, static_cast<uint32_t>(position));
  return uniform_from_word(philox4x32_10(c, philox_key(seed)).w[token & 3]);
}

float gumbel_noise(uint64_t seed, int64_t position, int32_t token) {
  return gumbel_from_uniform(uniform_noise(seed, position, token));
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, int64_t position) {
  DSA_CHECK(validate(p).ok());
  check_position(position);
  if (p.temperature == 0.f) return argmax_token(logits);
  // Pruning: a token is skipped, without drawing its noise, when even the largest gamma cannot
  // reach the score to beat: max(the best score so far, the lowest possible score of the max
  // token). fl(s + gamma_max) < t implies fl(s + gamma_v) < t (rounding is monotone), so the result
  // is the unpruned argmax exactly. A kept token whose probability underflows in fp64 (scaled logit
  // more than 745 below the max) never wins, since gamma spans less than 20, so the argmax over
  // the kept ids equals §6.3's argmax over pi(v) > 0.
  GumbelStream gumbel(p.seed, position);
  Best best;
  const double widest = gumbel_max();
  const auto offer = [&](int32_t v, double s, double lowest_max_score) {
    if (s + widest < std::max(best.score, lowest_max_score)) return;
    best.offer(v, s + static_cast<double>(gumbel(v)));
  };
  if (filters_off(p, logits.size())) {
    // Two passes over the row in id order, no allocation.
    const Scaler scale(logits, p.temperature);
    double m = -kInf;
    for (float x : logits) m = std::max(m, scale(x));
    if (m == -kInf) return kNoToken;
    for (size_t v = 0; v < logits.size(); ++v) {
      const double s = scale(logits[v]);
      if (s > -kInf) offer(static_cast<int32_t>(v), s, m + gumbel_min());
    }
    return best.token;
  }
  const Kept k = filter(logits, p);
  for (int32_t v : k.ids) offer(v, k.scaled[size_t(v)], k.max_scaled + gumbel_min());
  return best.token;
}

std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& p) {
  DSA_CHECK(validate(p).ok());
  std::vector<double> pi(logits.size(), 0.0);
  if (p.temperature == 0.f) {
    const int32_t y = argmax_token(logits);
    if (y != kNoToken) pi[size_t(y)] = 1.0;
    return pi;
  }
  const Kept k = filter(logits, p);
  if (k.ids.empty()) return pi;
  double z = 0;
  for (int32_t v : k.ids) z += (pi[size_t(v)] = std::exp(k.scaled[size_t(v)] - k.max_scaled));
  for (int32_t v : k.ids) pi[size_t(v)] /= z;
  return pi;
}

}  // namespace dsa::kernels
