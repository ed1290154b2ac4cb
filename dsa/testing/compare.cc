#include "dsa/testing/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dsa::testing {

namespace {
constexpr int kMaxReported = 8;

void note(CompareResult& r, const std::string& line) {
  r.ok = false;
  if (++r.mismatches <= kMaxReported) r.message += line + "\n";
}

void finish(CompareResult& r, int64_t n) {
  if (!r.ok) r.message = fmt::format("{} of {} elements differ:\n{}", r.mismatches, n, r.message);
}

bool same_nonfinite(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;  // both infinite: same sign required
}
}  // namespace

CompareResult within_bound(std::span<const float> got, std::span<const float> ref,
                           std::span<const float> bound) {
  CompareResult r;
  if (got.size() != ref.size() || bound.size() != ref.size()) {
    r.ok = false;
    r.message =
        fmt::format("size mismatch: got {} ref {} bound {}", got.size(), ref.size(), bound.size());
    return r;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    float g = got[i], f = ref[i];
    if (!std::isfinite(g) || !std::isfinite(f)) {
      if (!same_nonfinite(g, f)) note(r, fmt::format("[{}] got {} ref {}", i, g, f));
      continue;
    }
    double err = std::fabs(double{g} - double{f});
    r.max_abs_err = std::max(r.max_abs_err, err);
    if (err > bound[i])
      note(r,
           fmt::format("[{}] got {} ref {} (err {:.3g} > bound {:.3g})", i, g, f, err, bound[i]));
  }
  finish(r, static_cast<int64_t>(got.size()));
  return r;
}

CompareResult all_close(std::span<const float> got, std::span<const float> ref, double atol,
                        double rtol) {
  std::vector<float> bound(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    bound[i] = static_cast<float>(atol + rtol * std::fabs(double{ref[i]}));
  }
  return within_bound(got, ref, bound);
}

CompareResult equal_i32(std::span<const int32_t> got, std::span<const int32_t> ref) {
  CompareResult r;
  if (got.size() != ref.size()) {
    r.ok = false;
    r.message = fmt::format("size mismatch: got {} ref {}", got.size(), ref.size());
    return r;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != ref[i]) note(r, fmt::format("[{}] got {} ref {}", i, got[i], ref[i]));
  }
  finish(r, static_cast<int64_t>(got.size()));
  return r;
}

CompareResult equal_rows_as_sets(std::span<const int32_t> got, std::span<const int32_t> ref,
                                 int64_t row_len) {
  CompareResult r;
  if (got.size() != ref.size() || row_len <= 0 || got.size() % row_len != 0) {
    r.ok = false;
    r.message = fmt::format("size mismatch: got {} ref {} row {}", got.size(), ref.size(), row_len);
    return r;
  }
  std::vector<int32_t> a(row_len), b(row_len);
  for (size_t row = 0; row * row_len < got.size(); ++row) {
    std::copy_n(got.begin() + row * row_len, row_len, a.begin());
    std::copy_n(ref.begin() + row * row_len, row_len, b.begin());
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) {
      auto diff = std::mismatch(a.begin(), a.end(), b.begin());
      note(r, fmt::format("row {}: sorted sets first differ at rank {}: got {} ref {}", row,
                          diff.first - a.begin(), *diff.first, *diff.second));
    }
  }
  finish(r, static_cast<int64_t>(got.size() / row_len));
  return r;
}

}  // namespace dsa::testing
