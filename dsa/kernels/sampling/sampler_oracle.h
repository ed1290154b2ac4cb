// Test-only oracle for the sampler's distribution pi (sampler.h's rules), so the distribution tests
// do not judge the sampler by its own filter code. Written from the rules in sampler.h's header,
// deliberately unlike sampler.cc: no pruning, no lazy partial sort, no shared scaler; one full
// sort of (-score, id) pairs, then plain prefix cuts. Meant for small V (it sorts the whole row).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "dsa/kernels/sampling/sampler.h"

namespace dsa::kernels::sampler_oracle {

// Temperature 0: one-hot on the largest logit, ties to the lowest id; NaN and -inf never win, so a
// row of only those gives all zeros.
inline std::vector<double> greedy_distribution(std::span<const float> logits) {
  std::vector<double> pi(logits.size(), 0.0);
  std::vector<float> usable;
  for (float x : logits) {
    if (!std::isnan(x) && x != -std::numeric_limits<float>::infinity()) usable.push_back(x);
  }
  if (usable.empty()) return pi;
  const float top = *std::max_element(usable.begin(), usable.end());
  // The first id holding the top value is the lowest one.
  const auto first = std::find(logits.begin(), logits.end(), top);
  pi[size_t(first - logits.begin())] = 1.0;
  return pi;
}

// pi from first principles: temperature, then top-k, then top-p on the distribution renormalised
// after top-k; ordering by scaled logit descending, ties to the lower id; NaN / -inf excluded;
// +inf logits, when present, are the only candidates and equally likely.
inline std::vector<double> distribution(std::span<const float> logits, const SamplingParams& p) {
  if (p.temperature == 0.f) return greedy_distribution(logits);
  const double inf = std::numeric_limits<double>::infinity();
  bool any_pos_inf = false;
  for (float x : logits) any_pos_inf = any_pos_inf || double(x) == inf;

  // Candidates as (-scaled logit, id): the default pair order is then exactly "score descending,
  // lower id first on ties". With +inf present every candidate scores 0 (the softmax's limit).
  std::vector<std::pair<double, int32_t>> order;
  for (size_t v = 0; v < logits.size(); ++v) {
    const double x = logits[v];
    if (any_pos_inf) {
      if (x == inf) order.emplace_back(-0.0, int32_t(v));
    } else if (std::isfinite(x)) {
      order.emplace_back(-(x / double(p.temperature)), int32_t(v));
    }
  }
  std::vector<double> pi(logits.size(), 0.0);
  if (order.empty()) return pi;
  std::sort(order.begin(), order.end());

  // top-k: the first k of the full order.
  if (p.top_k > 0 && size_t(p.top_k) < order.size()) order.resize(size_t(p.top_k));

  // Softmax over the top-k survivors (order[0] holds the largest score, so no exp overflows).
  std::vector<double> weight(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    weight[i] = std::exp(order[0].first - order[i].first);
    total += weight[i];
  }

  // top-p: the shortest prefix whose renormalised mass reaches top_p; every survivor if rounding
  // leaves the whole just short of it.
  size_t keep = order.size();
  if (p.top_p < 1.f) {
    double mass = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += weight[i] / total;
      if (mass >= double(p.top_p)) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += weight[i];
  for (size_t i = 0; i < keep; ++i) pi[size_t(order[i].second)] = weight[i] / kept_total;
  return pi;
}

}  // namespace dsa::kernels::sampler_oracle
