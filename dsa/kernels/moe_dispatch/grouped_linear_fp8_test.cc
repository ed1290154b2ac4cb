// CPU tests of grouped_linear_ref with FP8 block-scaled weights (SPEC.md §8.6, §8.8): every
// written row bit-identical to linear_ref's FP8 path on that row alone (the independent
// formulation: one dense linear per pair), the offset edge cases (empty groups, every pair in one
// group, spare capacity, unchecked clamping), checked-mode OutOfRange naming array, index and
// value (offsets, rows, null weights or scales, non-finite x or scales), unchecked skipping, and
// every host rule of the FP8 form.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

constexpr uint16_t kPoisonBf16 = 0x7FC1;

struct Fp8Run {
  Fp8GroupedProblem pr;
  std::vector<bf16> y;
  Status status;
  void go() {
    y.assign(size_t(pr.y_rows) * pr.out, bf16{kPoisonBf16});
    status = grouped_linear_ref(pr.params(y.data()));
  }
  bool row_is(int32_t r, const std::vector<bf16>& want) const {
    if (want.size() != size_t(pr.out)) return false;
    for (int32_t o = 0; o < pr.out; ++o)
      if (y[size_t(r) * pr.out + o].bits != want[size_t(o)].bits) return false;
    return true;
  }
  bool row_poisoned(int32_t r) const {
    for (int32_t o = 0; o < pr.out; ++o)
      if (y[size_t(r) * pr.out + o].bits != kPoisonBf16) return false;
    return true;
  }
  // Every dispatched pair's y row equals linear_ref on its row; every other y row is poison.
  void expect_per_row_linear_ref(const std::string& what) const {
    ASSERT_TRUE(status.ok()) << what << ": " << status.to_string();
    std::vector<bool> written(size_t(pr.y_rows), false);
    for (int32_t g = 0; g < pr.groups(); ++g) {
      for (int32_t i = pr.offsets[g]; i < pr.offsets[g + 1]; ++i) {
        const int32_t yr = pr.y_row[size_t(i)];
        EXPECT_TRUE(row_is(yr, fp8_linear_row(pr, g, i))) << what << ": pair " << i;
        written[size_t(yr)] = true;
      }
    }
    for (int32_t r = 0; r < pr.y_rows; ++r)
      if (!written[size_t(r)]) EXPECT_TRUE(row_poisoned(r)) << what << ": row " << r;
  }
};

Fp8Run make_run(const std::vector<int32_t>& counts, int32_t in, int32_t out, int32_t x_rows,
                int32_t spare, uint64_t seed) {
  Rng rng(seed);
  Fp8Run r;
  r.pr = make_fp8_grouped_problem(rng, counts, in, out, x_rows, spare, 3);
  return r;
}

// Shapes with a short last block on both sides (in 272 = 2 x 128 + 16, out 200) and whole
// blocks; pair counts 0, 1, odd and larger.
TEST(GroupedLinearFp8, BitIdenticalToPerRowLinearRef) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t in, out;
  } shapes[] = {{256, 128}, {272, 200}, {128, 384}, {16, 8}};
  int n = 0;
  for (const Shape& s : shapes) {
    Fp8Run r = make_run({0, 1, 3, 0, 7, 2}, s.in, s.out, 5, 0, seed + n++);
    r.go();
    r.expect_per_row_linear_ref(std::to_string(s.in) + " -> " + std::to_string(s.out));
  }
}

// Against the block formula of §8.8 in long double with its own quantisation of x (the check's
// independent formulation), MoE-driven: x_row = pair_row, y_row = pair_slot, padded slots.
TEST(GroupedLinearFp8, MatchesIndependentBlockFormula) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t rows, experts, k, in, out;
  } shapes[] = {{40, 4, 2, 272, 200}, {9, 8, 4, 256, 128}, {3, 16, 8, 16, 1}, {2, 256, 8, 512, 64}};
  int n = 0;
  for (const Shape& s : shapes) {
    const Status st = check_grouped_linear_fp8(grouped_linear_ref, s.rows, s.experts, s.k, s.in,
                                               s.out, seed + n++);
    EXPECT_TRUE(st.ok()) << s.in << " -> " << s.out << ": " << st.to_string();
  }
}

// The check sees a wrong element: the reference with one output of the first pair perturbed.
TEST(GroupedLinearFp8, IndependentCheckCatchesAWrongOutput) {
  const GroupedLinearFn wrong = [](const GroupedLinearParams& p) {
    DSA_RETURN_IF_ERROR(grouped_linear_ref(p));
    bf16& v = p.y[int64_t{p.y_row[0]} * p.out_features + 3];
    v = float_to_bf16(bf16_to_float(v) * 1.5f + 0.25f);
    return ok_status();
  };
  const Status s = check_grouped_linear_fp8(wrong, 9, 4, 2, 256, 64, testing::test_seed());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.to_string();
  EXPECT_NE(s.message().find("][3] = "), std::string::npos) << s.to_string();
}

TEST(GroupedLinearFp8, AllPairsInOneGroup) {
  Fp8Run r = make_run({0, 0, 19, 0}, 384, 128, 7, 0, testing::test_seed());
  r.go();
  r.expect_per_row_linear_ref("one group");
}

TEST(GroupedLinearFp8, AllGroupsEmptyWritesNothing) {
  Fp8Run r = make_run({0, 0, 0}, 128, 64, 3, 4, testing::test_seed());
  r.go();
  r.expect_per_row_linear_ref("empty");
}

// Capacity beyond the pairs: the spare pair entries hold garbage and are never read.
TEST(GroupedLinearFp8, SpareCapacityIsNotRead) {
  Fp8Run r = make_run({2, 0, 3}, 256, 64, 4, 5, testing::test_seed());
  for (int32_t i = r.pr.offsets.back(); i < r.pr.capacity; ++i) r.pr.x_row[size_t(i)] = -77;
  r.go();
  r.expect_per_row_linear_ref("spare");
}

// The MoE's composition through moe_group: each dispatched slot is linear_ref of its row with its
// expert's weight, padded rows untouched.
TEST(GroupedLinearFp8, DrivenByMoeGroup) {
  Rng rng(testing::test_seed());
  const int32_t rows = 13, experts = 6, k = 2;
  const std::vector<int32_t> ids = random_expert_ids(rng, rows, experts, k, 4);
  const Grouping grouping = expected_grouping(ids, experts, k);
  Fp8Run r;
  r.pr = make_fp8_grouped_problem(rng, std::vector<int32_t>(size_t(experts), 0), 256, 128, rows,
                                  rows * k, 4);
  r.pr.offsets = grouping.offsets;
  r.pr.x_row = grouping.pair_row;
  r.pr.y_row = grouping.pair_slot;
  r.go();
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  for (int32_t s = 0; s < rows * k; ++s) {
    if (ids[size_t(s)] < 0) {
      EXPECT_TRUE(r.row_poisoned(s)) << "slot " << s;
      continue;
    }
    // Pair of slot s: where grouping put it.
    int32_t i = 0;
    while (grouping.pair_slot[size_t(i)] != s) ++i;
    EXPECT_TRUE(r.row_is(s, fp8_linear_row(r.pr, ids[size_t(s)], i))) << "slot " << s;
  }
}

// Unchecked: offsets clamped into [0, capacity] and made non-decreasing; bad rows and null
// weights or scales skip their pairs, the rest are computed.
TEST(GroupedLinearFp8, UncheckedNeutralises) {
  ScopedCheckedMode unchecked(false);
  Fp8Run r = make_run({2, 2, 2}, 128, 64, 4, 0, testing::test_seed());
  r.pr.offsets = {-3, 2, 1, 99};  // eff = {0, 2, 2, 6}: group 0 pairs 0-1, group 2 pairs 2-5
  r.pr.x_row[3] = 9;              // >= x_rows: skipped
  r.pr.y_row[4] = -1;             // skipped
  r.go();
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  for (int32_t i : {0, 1})
    EXPECT_TRUE(r.row_is(r.pr.y_row[size_t(i)], fp8_linear_row(r.pr, 0, i))) << i;
  for (int32_t i : {2, 5})
    EXPECT_TRUE(r.row_is(r.pr.y_row[size_t(i)], fp8_linear_row(r.pr, 2, i))) << i;
  EXPECT_TRUE(r.row_poisoned(r.pr.y_row[3]));

  Fp8Run q = make_run({2, 2}, 128, 64, 4, 0, testing::test_seed() + 1);
  q.pr.weight_scales[0] = nullptr;  // group 0 skipped
  q.pr.weights_fp8[1] = nullptr;    // group 1 skipped
  q.go();
  ASSERT_TRUE(q.status.ok()) << q.status.to_string();
  for (int32_t r2 = 0; r2 < q.pr.y_rows; ++r2) EXPECT_TRUE(q.row_poisoned(r2)) << r2;
}

// Checked mode: each data rule is OutOfRange naming the array, index and value; nothing written.
struct Fp8Checked : ::testing::Test {
  Fp8Run r = make_run({2, 1, 3}, 128, 64, 5, 1, testing::test_seed());
  ScopedCheckedMode checked{true};
  void expect_out_of_range(const std::string& text) {
    r.go();
    EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << r.status.to_string();
    EXPECT_NE(r.status.message().find(text), std::string::npos) << r.status.to_string();
    for (int32_t y = 0; y < r.pr.y_rows; ++y) EXPECT_TRUE(r.row_poisoned(y)) << "row " << y;
  }
};

TEST_F(Fp8Checked, ValidInputsPass) {
  r.go();
  r.expect_per_row_linear_ref("checked");
}
TEST_F(Fp8Checked, FirstOffsetNotZero) {
  r.pr.offsets[0] = 1;
  expect_out_of_range("offsets[0] = 1");
}
TEST_F(Fp8Checked, DecreasingOffsets) {
  r.pr.offsets[2] = 1;
  expect_out_of_range("offsets[2] = 1");
}
TEST_F(Fp8Checked, LastOffsetBeyondCapacity) {
  r.pr.offsets[3] = 8;
  expect_out_of_range("offsets[3] = 8");
}
TEST_F(Fp8Checked, XRowOutOfRange) {
  r.pr.x_row[4] = 5;
  expect_out_of_range("x_row[4] = 5");
}
TEST_F(Fp8Checked, YRowOutOfRange) {
  r.pr.y_row[1] = -2;
  expect_out_of_range("y_row[1] = -2");
}
TEST_F(Fp8Checked, NullWeightOfAGroupWithPairs) {
  r.pr.weights_fp8[2] = nullptr;
  expect_out_of_range("weights_fp8[2] is null");
}
TEST_F(Fp8Checked, NullScalesOfAGroupWithPairs) {
  r.pr.weight_scales[1] = nullptr;
  expect_out_of_range("weight_scales[1] is null");
}
TEST_F(Fp8Checked, NonFiniteXOfADispatchedRow) {
  const int32_t xr = r.pr.x_row[3];
  r.pr.x[size_t(xr) * r.pr.in + 17] = float_to_bf16(INFINITY);
  expect_out_of_range("x[" + std::to_string(xr) + "][17] = inf");
}
TEST_F(Fp8Checked, NonFiniteScale) {
  r.pr.sw[0][0] = NAN;  // matrix 0: group 0
  expect_out_of_range("weight_scales[0][0] = nan");
}
TEST_F(Fp8Checked, EmptyGroupsWeightsAreNotRead) {
  Fp8Run e = make_run({2, 0, 3}, 128, 64, 5, 0, testing::test_seed());
  e.pr.weights_fp8[1] = nullptr;
  e.pr.weight_scales[1] = nullptr;
  e.go();
  e.expect_per_row_linear_ref("empty group, null weight");
}

// Host rules of the FP8 form; the message names the argument.
struct Fp8Validation : ::testing::Test {
  Fp8Run r = make_run({1, 2}, 128, 64, 3, 0, testing::test_seed());
  std::vector<bf16> y = std::vector<bf16>(size_t(3) * 64);
  std::vector<const bf16*> bf16_weights = {nullptr, nullptr};
  GroupedLinearParams p = r.pr.params(y.data());
  void expect_invalid(const std::string& text) {
    const Status s = grouped_linear_ref(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(text), std::string::npos) << s.to_string();
  }
};

TEST_F(Fp8Validation, ValidInputsPass) { EXPECT_TRUE(grouped_linear_ref(p).ok()); }
TEST_F(Fp8Validation, BothWeightForms) {
  p.weights = bf16_weights.data();
  expect_invalid("weights and weights_fp8 are both set");
}
TEST_F(Fp8Validation, NoWeightForm) {
  p.weights_fp8 = nullptr;
  p.weight_scales = nullptr;
  expect_invalid("weights and weights_fp8 are both null");
}
TEST_F(Fp8Validation, Fp8WithoutScales) {
  p.weight_scales = nullptr;
  expect_invalid("weight_scales is null");
}
TEST_F(Fp8Validation, ScalesWithBf16Weights) {
  p.weights_fp8 = nullptr;
  p.weights = bf16_weights.data();
  expect_invalid("weight_scales is set with bf16 weights");
}
TEST_F(Fp8Validation, InFeaturesNotAMultipleOf16) {
  p.in_features = 120;
  expect_invalid("in_features = 120: must be a multiple of 16");
}

// The paired form (gate and up): y equals a call without the second projection, y_b a call with
// the second projection's weights, bit for bit; both are per-row linear_ref.
TEST(GroupedLinearFp8, PairedProjectionEqualsTwoCalls) {
  Fp8Run a = make_run({0, 1, 3, 0, 7, 2}, 272, 200, 5, 1, testing::test_seed());
  Fp8Run b = make_run({0, 1, 3, 0, 7, 2}, 272, 200, 5, 1, testing::test_seed() + 1);
  b.pr.x = a.pr.x;  // the same pairs, other weights
  b.pr.x_row = a.pr.x_row;
  b.pr.y_row = a.pr.y_row;
  a.go();
  b.go();
  a.expect_per_row_linear_ref("first alone");
  b.expect_per_row_linear_ref("second alone");
  std::vector<bf16> ya(a.y.size(), bf16{kPoisonBf16}), yb(b.y.size(), bf16{kPoisonBf16});
  GroupedLinearParams p = a.pr.params(ya.data());
  p.weights_fp8_b = b.pr.weights_fp8.data();
  p.weight_scales_b = b.pr.weight_scales.data();
  p.y_b = yb.data();
  ASSERT_TRUE(grouped_linear_ref(p).ok());
  for (size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(ya[i].bits, a.y[i].bits) << "y " << i;
  for (size_t i = 0; i < yb.size(); ++i) ASSERT_EQ(yb[i].bits, b.y[i].bits) << "y_b " << i;
}
TEST_F(Fp8Validation, PairedProjectionNeedsAllThreeFields) {
  std::vector<bf16> yb(y.size());
  p.y_b = yb.data();
  expect_invalid("weights_fp8_b, weight_scales_b and y_b: 1 of 3 set");
  p.weights_fp8_b = r.pr.weights_fp8.data();
  expect_invalid("2 of 3 set");
  p.weight_scales_b = r.pr.weight_scales.data();
  EXPECT_TRUE(grouped_linear_ref(p).ok());
  p.weights_fp8 = nullptr;
  p.weight_scales = nullptr;
  p.weights = bf16_weights.data();
  expect_invalid("the second projection is FP8 only");
}

TEST(GroupedLinearFp8, ScratchBytes) {
  GroupedLinearParams p;
  std::vector<const uint8_t*> w8(1);
  p.x_rows = 3;
  p.in_features = 272;                             // 3 blocks
  EXPECT_EQ(grouped_linear_scratch_bytes(p), 0u);  // bf16 weights need none
  p.weights_fp8 = w8.data();
  EXPECT_EQ(grouped_linear_scratch_bytes(p), 1024u + 256u);  // 816 -> 1024; 36 -> 256
  p.x_rows = 0;
  EXPECT_EQ(grouped_linear_scratch_bytes(p), 0u);
}

}  // namespace
}  // namespace dsa::kernels
