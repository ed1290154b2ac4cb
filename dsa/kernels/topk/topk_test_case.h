// Owning inputs of one top-k call, shared by the top-k test files. idx starts poisoned so an
// unwritten slot can never pass as a result.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "dsa/kernels/topk/topk.h"
#include "dsa/testing/random.h"

namespace dsa::kernels::topk_test {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct TopkCase {
  int32_t ld = 0, k = 0;
  std::vector<float> logits;      // [R, ld], +inf past every row's window unless set
  std::vector<int32_t> len;       // [R]
  std::vector<int32_t> col_base;  // [R] or empty
  std::vector<int32_t> out_row;   // [R] or empty
  std::vector<int32_t> offset;    // [R] or empty
  std::vector<int32_t> row_page;  // [R_out] or empty
  std::vector<int32_t> idx;       // [R_out, K], poisoned
  PageTable page_table;
  TopkVariant variant = TopkVariant::kPlain;

  TopkCase(int32_t rows, int32_t ld_, int32_t k_, int32_t out_rows = -1)
      : ld(ld_), k(k_), logits(size_t(rows) * ld_, kInf), len(rows, 0) {
    idx.assign(size_t(out_rows < 0 ? rows : out_rows) * k_, kPoisonI32);
  }
  int32_t rows() const { return static_cast<int32_t>(len.size()); }
  int32_t out_rows() const { return static_cast<int32_t>(idx.size() / k); }
  float* row(int32_t r) { return logits.data() + size_t(r) * ld; }
  const int32_t* idx_row(int32_t o) const { return idx.data() + size_t(o) * k; }

  TopkParams params() {
    TopkParams p;
    p.logits = logits.data();
    p.logits_ld = ld;
    p.rows = rows();
    p.len = len.data();
    p.col_base = col_base.empty() ? nullptr : col_base.data();
    p.k = k;
    p.variant = variant;
    p.page_table = page_table;
    p.row_page = row_page.empty() ? nullptr : row_page.data();
    p.offset = offset.empty() ? nullptr : offset.data();
    p.out_row = out_row.empty() ? nullptr : out_row.data();
    p.out_rows = out_rows();
    p.idx = idx.data();
    return p;
  }
};

// A value with the hazards of §3e: ties on a coarse grid, +-inf, NaN, +-0.
inline float hazard_value(testing::Rng& rng) {
  int64_t roll = rng.randint(0, 99);
  if (roll < 4) return kInf;
  if (roll < 10) return -kInf;
  if (roll < 15) return kNaN;
  if (roll < 18) return roll == 15 ? -0.0f : 0.0f;
  return std::round(rng.normal() * 4.f) / 4.f;
}

}  // namespace dsa::kernels::topk_test
