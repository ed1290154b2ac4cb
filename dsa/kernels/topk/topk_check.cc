#include "dsa/kernels/topk/topk_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <tuple>

namespace dsa::kernels {

std::vector<int32_t> topk_positions_by_full_sort(const float* row, int32_t len, int32_t k) {
  // Sort key, larger = better: (is a number, value with -0 folded into +0, -position). Every NaN
  // gets (0, 0, -p), below every number including -inf, and NaNs tie among themselves.
  using Key = std::tuple<int, float, int64_t>;
  std::vector<Key> keys;
  keys.reserve(static_cast<size_t>(std::max(len, 0)));
  for (int32_t p = 0; p < len; ++p) {
    float v = row[p];
    bool number = !std::isnan(v);
    keys.emplace_back(number ? 1 : 0, number ? v + 0.0f : 0.0f, -int64_t{p});
  }
  std::sort(keys.begin(), keys.end(), std::greater<Key>());
  const size_t m = std::min<size_t>(keys.size(), static_cast<size_t>(k));
  std::vector<int32_t> positions;
  for (size_t i = 0; i < m; ++i) positions.push_back(static_cast<int32_t>(-std::get<2>(keys[i])));
  std::sort(positions.begin(), positions.end());
  return positions;
}

Status compare_topk_row(const int32_t* got, std::vector<int32_t> expected, int32_t k, int32_t row,
                        bool ordered) {
  const int32_t m = static_cast<int32_t>(expected.size());
  for (int32_t i = 0; ordered && i < m; ++i) {
    if (got[i] != expected[i]) {
      return internal_error(fmt::format(
          "topk: idx[{}][{}] = {}: a row with len <= K lists its positions in ascending order, "
          "expected {}",
          row, i, got[i], expected[i]));
    }
  }
  for (int32_t i = m; i < k; ++i) {
    if (got[i] != -1) {
      return internal_error(
          fmt::format("topk: idx[{}][{}] = {}: expected -1 past m = {}", row, i, got[i], m));
    }
  }
  std::vector<int32_t> sel(got, got + m);
  std::sort(sel.begin(), sel.end());
  std::sort(expected.begin(), expected.end());
  for (int32_t i = 0; i < m; ++i) {
    if (sel[i] != expected[i]) {
      // The smallest differing value is in one set and not the other.
      bool extra = sel[i] < expected[i];
      int32_t v = extra ? sel[i] : expected[i];
      int32_t at = static_cast<int32_t>(std::find(got, got + m, v) - got);
      return internal_error(
          extra ? fmt::format("topk: idx[{}][{}] = {}: not in the expected set (m = {})", row, at,
                              v, m)
                : fmt::format("topk: row {}: expected entry {} missing from idx[{}][0..{})", row, v,
                              row, m));
    }
  }
  return ok_status();
}

namespace {
// A value with the hazards of §3e mixed in: ties (values on a coarse grid), +-inf, NaN, +-0.
float hazard_value(std::mt19937_64& gen, bool coarse) {
  int64_t roll = std::uniform_int_distribution<int64_t>(0, 99)(gen);
  if (roll < 3) return std::numeric_limits<float>::infinity();
  if (roll < 8) return -std::numeric_limits<float>::infinity();
  if (roll < 12) return std::numeric_limits<float>::quiet_NaN();
  if (roll < 14) return roll == 12 ? -0.0f : 0.0f;
  float v = std::normal_distribution<float>(0.f, 1.f)(gen);
  return coarse ? std::round(v * 2.f) / 2.f : v;
}
}  // namespace

Status check_topk(TopkFn op, int32_t rows, int32_t k, int32_t context_len, uint64_t seed) {
  if (rows < 1 || context_len < 0 || k < 1 || k > kMaxTopk) {
    return invalid_argument(fmt::format(
        "check_topk: rows = {}, k = {}, context_len = {}: need rows >= 1, k in [1, {}] and "
        "context_len >= 0 (the op itself judges K further)",
        rows, k, context_len, kMaxTopk));
  }
  std::mt19937_64 gen(seed);
  auto randint = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  const int32_t ld = (std::max(context_len, 1) + 255) / 256 * 256;  // §2.6 row stride rule
  std::vector<int32_t> len(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    int64_t l = randint(0, context_len);
    if (r % 4 == 0) l = 0;                                     // padded row
    if (r % 4 == 1) l = randint(0, std::min(k, context_len));  // trivial row, <= K
    if (r % 4 == 2) l = std::min(k, context_len);              // exactly K
    if (r == rows - 1) l = context_len;                        // the longest row
    len[r] = static_cast<int32_t>(l);
  }
  // Columns past a row's length hold +inf, which would win if any were read.
  std::vector<float> logits(size_t(rows) * ld, std::numeric_limits<float>::infinity());
  for (int32_t r = 0; r < rows; ++r) {
    bool coarse = r % 2 == 1;
    for (int32_t c = 0; c < len[r]; ++c) logits[size_t(r) * ld + c] = hazard_value(gen, coarse);
  }
  std::vector<int32_t> idx(size_t(rows) * k, kPoisonI32);

  TopkParams p;
  p.logits = logits.data();
  p.logits_ld = ld;
  p.rows = rows;
  p.len = len.data();
  p.k = k;
  p.out_rows = rows;
  p.idx = idx.data();
  DSA_RETURN_IF_ERROR(op(p));
  for (int32_t r = 0; r < rows; ++r) {
    DSA_RETURN_IF_ERROR(compare_topk_row(
        idx.data() + size_t(r) * k,
        topk_positions_by_full_sort(logits.data() + size_t(r) * ld, len[r], k), k, r, len[r] <= k));
  }
  return ok_status();
}

}  // namespace dsa::kernels
