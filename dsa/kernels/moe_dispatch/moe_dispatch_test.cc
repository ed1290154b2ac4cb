// CPU tests of moe_group_ref and grouped_linear_ref (SPEC.md §8.6): hand-computed groupings,
// random ids against an independent formulation (stable sort), the edge shapes (all padded,
// E = 1, no slots), checked and unchecked data rules; grouped_linear against long double and bit
// for bit against linear_ref per row, the row indirection, untouched (poisoned) rows, spare
// capacity, and every host validation rule.
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

constexpr int32_t kPoison = 0x7FFFFFFF;
constexpr uint16_t kPoisonBf16 = 0x7FC1;

// ---------------------------------------------------------------------------------------------
// moe_group
// ---------------------------------------------------------------------------------------------

struct GroupRun {
  std::vector<int32_t> offsets, pair_row, pair_slot;
  Status status;
};

MoeGroupParams group_params(const std::vector<int32_t>& ids, int32_t experts, int32_t k,
                            GroupRun& out) {
  out.offsets.assign(size_t(experts) + 1, kPoison);
  out.pair_row.assign(ids.size(), kPoison);
  out.pair_slot.assign(ids.size(), kPoison);
  MoeGroupParams p;
  p.expert_ids = ids.data();
  p.num_slots = static_cast<int32_t>(ids.size());
  p.num_experts = experts;
  p.k = k;
  p.offsets = out.offsets.data();
  p.pair_row = out.pair_row.data();
  p.pair_slot = out.pair_slot.data();
  return p;
}

GroupRun run_group(const std::vector<int32_t>& ids, int32_t experts, int32_t k) {
  GroupRun r;
  r.status = moe_group_ref(group_params(ids, experts, k, r));
  return r;
}

void expect_grouping(const GroupRun& got, const Grouping& want, const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.to_string();
  EXPECT_EQ(got.offsets, want.offsets) << what;
  EXPECT_EQ(got.pair_row, want.pair_row) << what;
  EXPECT_EQ(got.pair_slot, want.pair_slot) << what;
}

// 4 rows, k = 2, 3 experts; row 1 padded. Slots: 0:2 1:0 | 2:-1 3:-1 | 4:0 5:1 | 6:1 7:2.
// Expert 0 gets slots 1, 4; expert 1 gets 5, 6; expert 2 gets 0, 7 (ascending slot each).
TEST(MoeGroup, HandComputed) {
  const GroupRun r = run_group({2, 0, -1, -1, 0, 1, 1, 2}, 3, 2);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.offsets, (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(r.pair_slot, (std::vector<int32_t>{1, 4, 5, 6, 0, 7, -1, -1}));
  EXPECT_EQ(r.pair_row, (std::vector<int32_t>{0, 2, 2, 3, 0, 3, -1, -1}));
}

TEST(MoeGroup, RandomRoutedRowsMatchIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t rows, experts, k;
  } shapes[] = {{1, 4, 2},     {7, 4, 2},      {300, 4, 2},   {33, 16, 4},
                {256, 256, 8}, {4096, 256, 8}, {100, 512, 8}, {5, 8, 8}};
  int n = 0;
  for (const Shape& s : shapes) {
    const Status st = check_moe_group(moe_group_ref, s.rows, s.experts, s.k, seed + n++);
    EXPECT_TRUE(st.ok()) << "rows " << s.rows << " E " << s.experts << ": " << st.to_string();
  }
}

// Ids drawn with replacement and -1 scattered anywhere (not only whole rows): duplicates of one
// expert in a row and long runs of one expert are grouped in slot order too.
TEST(MoeGroup, RandomIdsWithHolesMatchIndependentFormulation) {
  Rng rng(testing::test_seed());
  for (int32_t experts : {1, 3, 64, 256}) {
    for (int32_t k : {1, 2, 8}) {
      const int32_t rows = int32_t(rng.randint(1, 700));
      std::vector<int32_t> ids(size_t(rows) * k);
      for (auto& id : ids) id = int32_t(rng.randint(-1, experts - 1));
      expect_grouping(run_group(ids, experts, k), expected_grouping(ids, experts, k),
                      "E " + std::to_string(experts) + " k " + std::to_string(k));
    }
  }
}

TEST(MoeGroup, AllPaddedDispatchesNothing) {
  const GroupRun r = run_group(std::vector<int32_t>(24, -1), 8, 8);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.offsets, std::vector<int32_t>(9, 0));
  EXPECT_EQ(r.pair_row, std::vector<int32_t>(24, -1));
  EXPECT_EQ(r.pair_slot, std::vector<int32_t>(24, -1));
}

TEST(MoeGroup, OneExpert) {
  const GroupRun r = run_group({0, -1, 0, 0}, 1, 1);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.offsets, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(r.pair_row, (std::vector<int32_t>{0, 2, 3, -1}));
  EXPECT_EQ(r.pair_slot, (std::vector<int32_t>{0, 2, 3, -1}));
}

TEST(MoeGroup, NoSlotsWritesZeroOffsets) {
  std::vector<int32_t> offsets(5, kPoison);
  MoeGroupParams p;
  p.num_experts = 4;
  p.k = 8;
  p.offsets = offsets.data();
  ASSERT_TRUE(moe_group_ref(p).ok());
  EXPECT_EQ(offsets, std::vector<int32_t>(5, 0));
}

TEST(MoeGroup, CheckedBadIdIsOutOfRange) {
  ScopedCheckedMode checked(true);
  for (int32_t bad : {4, -2, 1000}) {
    const GroupRun r = run_group({0, 1, 2, 3, 0, bad, 1, 2}, 4, 2);
    EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << r.status.to_string();
    EXPECT_NE(r.status.message().find("expert_ids[5] = " + std::to_string(bad)), std::string::npos)
        << r.status.to_string();
  }
}

TEST(MoeGroup, UncheckedBadIdIsNotDispatched) {
  ScopedCheckedMode unchecked(false);
  const std::vector<int32_t> ids = {0, 1, 2, 3, 0, 4, -7, 2};
  std::vector<int32_t> as_padding = ids;
  as_padding[5] = as_padding[6] = -1;
  expect_grouping(run_group(ids, 4, 2), expected_grouping(as_padding, 4, 2), "unchecked");
}

// One test per host rule; the message names the field.
void expect_group_invalid(const MoeGroupParams& p, const std::string& field) {
  const Status s = moe_group_ref(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(field), std::string::npos) << s.to_string();
}

struct GroupValidation : ::testing::Test {
  std::vector<int32_t> ids = {0, 1, 1, 0};
  GroupRun out;
  MoeGroupParams p = group_params(ids, 2, 2, out);
};

TEST_F(GroupValidation, NegativeSlots) {
  p.num_slots = -2;
  expect_group_invalid(p, "num_slots = -2");
}
TEST_F(GroupValidation, NoExperts) {
  p.num_experts = 0;
  expect_group_invalid(p, "num_experts = 0");
}
TEST_F(GroupValidation, ZeroK) {
  p.k = 0;
  expect_group_invalid(p, "k = 0");
}
TEST_F(GroupValidation, SlotsNotAMultipleOfK) {
  p.k = 3;
  expect_group_invalid(p, "num_slots = 4");
}
TEST_F(GroupValidation, NullOffsets) {
  p.offsets = nullptr;
  expect_group_invalid(p, "offsets is null");
}
TEST_F(GroupValidation, NullExpertIds) {
  p.expert_ids = nullptr;
  expect_group_invalid(p, "expert_ids is null");
}
TEST_F(GroupValidation, NullPairRow) {
  p.pair_row = nullptr;
  expect_group_invalid(p, "pair_row is null");
}
TEST_F(GroupValidation, NullPairSlot) {
  p.pair_slot = nullptr;
  expect_group_invalid(p, "pair_slot is null");
}

// ---------------------------------------------------------------------------------------------
// grouped_linear
// ---------------------------------------------------------------------------------------------

// A grouped linear problem on host memory: x [x_rows, in], G weights, offsets, optional row
// lists, y [y_rows, out] poisoned.
struct Problem {
  int32_t in = 16, out = 8, x_rows = 0, y_rows = 0, capacity = 0;
  std::vector<bf16> x, y;
  std::vector<std::vector<bf16>> w;
  std::vector<const bf16*> weights;
  std::vector<int32_t> offsets, x_row, y_row;  // empty row list = nullptr

  Problem(Rng& rng, int32_t groups, int32_t in_f, int32_t out_f, int32_t xr, int32_t yr)
      : in(in_f), out(out_f), x_rows(xr), y_rows(yr) {
    x = rng.bf16_vector(size_t(xr) * in);
    for (int32_t g = 0; g < groups; ++g) {
      w.push_back(rng.bf16_vector(size_t(out) * in, 1.f / std::sqrt(float(in))));
      weights.push_back(w.back().data());
    }
    y.assign(size_t(yr) * out, bf16{kPoisonBf16});
  }
  GroupedLinearParams params() {
    GroupedLinearParams p;
    p.x = x.data();
    p.x_rows = x_rows;
    p.x_row = x_row.empty() ? nullptr : x_row.data();
    p.weights = weights.data();
    p.offsets = offsets.data();
    p.num_groups = static_cast<int32_t>(weights.size());
    p.capacity = capacity;
    p.in_features = in;
    p.out_features = out;
    p.y = y.data();
    p.y_rows = y_rows;
    p.y_row = y_row.empty() ? nullptr : y_row.data();
    return p;
  }
  // linear_ref on x row xr alone with W_g (T = 1).
  std::vector<bf16> linear_row(int32_t g, int32_t xr) const {
    std::vector<bf16> row(static_cast<size_t>(out));
    LinearParams lp;
    lp.x = &x[size_t(xr) * in];
    lp.weight = weights[g];
    lp.y = row.data();
    lp.num_tokens = 1;
    lp.in_features = in;
    lp.out_features = out;
    EXPECT_TRUE(linear_ref(lp).ok());
    return row;
  }
  bool row_poisoned(int32_t r) const {
    for (int32_t o = 0; o < out; ++o)
      if (y[size_t(r) * out + o].bits != kPoisonBf16) return false;
    return true;
  }
  bool row_equals(int32_t r, const std::vector<bf16>& want) const {
    for (int32_t o = 0; o < out; ++o)
      if (y[size_t(r) * out + o].bits != want[o].bits) return false;
    return true;
  }
};

TEST(GroupedLinear, MatchesLongDoubleReference) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t rows, experts, k, in, out;
  } shapes[] = {{40, 4, 2, 256, 128}, {40, 4, 2, 128, 256}, {9, 4, 4, 8, 72}, {3, 16, 4, 64, 1}};
  int n = 0;
  for (const Shape& s : shapes) {
    const Status st =
        check_grouped_linear(grouped_linear_ref, s.rows, s.experts, s.k, s.in, s.out, seed + n++);
    EXPECT_TRUE(st.ok()) << s.in << " -> " << s.out << ": " << st.to_string();
  }
}

// Every written row is bit-identical to linear_ref on that x row and W_g alone, through both
// indirections, with rows that no pair writes left untouched and capacity beyond the pairs.
TEST(GroupedLinear, BitIdenticalToLinearRefWithIndirection) {
  Rng rng(testing::test_seed());
  Problem pr(rng, 3, 96, 40, 11, 20);
  pr.capacity = 12;
  pr.offsets = {0, 4, 4, 9};                            // group 1 empty; pairs 9..11 spare
  pr.x_row = {3, 0, 10, 3, 7, 7, 1, 2, 9, -5, 123, 4};  // spare entries are never read
  pr.y_row = {19, 0, 5, 6, 2, 3, 11, 12, 13, 99, -1, 7};
  ASSERT_TRUE(grouped_linear_ref(pr.params()).ok());
  std::vector<bool> written(20, false);
  for (int32_t g = 0; g < 3; ++g) {
    for (int32_t i = pr.offsets[g]; i < pr.offsets[g + 1]; ++i) {
      EXPECT_TRUE(pr.row_equals(pr.y_row[i], pr.linear_row(g, pr.x_row[i]))) << "pair " << i;
      written[pr.y_row[i]] = true;
    }
  }
  for (int32_t r = 0; r < 20; ++r)
    if (!written[r]) EXPECT_TRUE(pr.row_poisoned(r)) << "row " << r << " was written";
}

// Null row lists: pair i reads x row i and writes y row i.
TEST(GroupedLinear, NullRowListsMeanIdentity) {
  Rng rng(testing::test_seed());
  Problem pr(rng, 2, 32, 24, 6, 8);
  pr.capacity = 8;
  pr.offsets = {0, 2, 5};
  ASSERT_TRUE(grouped_linear_ref(pr.params()).ok());
  for (int32_t i = 0; i < 5; ++i)
    EXPECT_TRUE(pr.row_equals(i, pr.linear_row(i < 2 ? 0 : 1, i))) << "pair " << i;
  for (int32_t r = 5; r < 8; ++r) EXPECT_TRUE(pr.row_poisoned(r)) << "row " << r;
}

// The MoE's composition: moe_group's output drives grouped_linear (x_row = pair_row, y_row =
// pair_slot), and each dispatched slot holds linear_ref of its row with its expert's weight.
TEST(GroupedLinear, DrivenByMoeGroup) {
  Rng rng(testing::test_seed());
  const int32_t rows = 37, experts = 6, k = 3;
  const std::vector<int32_t> ids = random_expert_ids(rng, rows, experts, k, 4);
  GroupRun grouping = run_group(ids, experts, k);
  ASSERT_TRUE(grouping.status.ok());
  Problem pr(rng, experts, 48, 56, rows, rows * k);
  pr.capacity = rows * k;
  pr.offsets = grouping.offsets;
  pr.x_row = grouping.pair_row;
  pr.y_row = grouping.pair_slot;
  ASSERT_TRUE(grouped_linear_ref(pr.params()).ok());
  for (int32_t s = 0; s < rows * k; ++s) {
    if (ids[s] < 0) {
      EXPECT_TRUE(pr.row_poisoned(s)) << "slot " << s;
    } else {
      EXPECT_TRUE(pr.row_equals(s, pr.linear_row(ids[s], s / k))) << "slot " << s;
    }
  }
}

TEST(GroupedLinear, ZeroCapacityWritesNothing) {
  Rng rng(testing::test_seed());
  Problem pr(rng, 2, 16, 8, 3, 3);
  pr.offsets = {0, 0, 0};
  ASSERT_TRUE(grouped_linear_ref(pr.params()).ok());
  for (int32_t r = 0; r < 3; ++r) EXPECT_TRUE(pr.row_poisoned(r));
}

// Checked mode: each data rule is OutOfRange naming the array, index and value.
struct GroupedChecked : ::testing::Test {
  Rng rng{testing::test_seed()};
  Problem pr{rng, 3, 16, 8, 5, 6};
  ScopedCheckedMode checked{true};
  void SetUp() override {
    pr.capacity = 6;
    pr.offsets = {0, 2, 3, 5};
    pr.x_row = {0, 1, 2, 3, 4, 0};
    pr.y_row = {5, 4, 3, 2, 1, 0};
  }
  void expect_out_of_range(const std::string& text) {
    const Status s = grouped_linear_ref(pr.params());
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find(text), std::string::npos) << s.to_string();
    for (int32_t r = 0; r < 6; ++r) EXPECT_TRUE(pr.row_poisoned(r)) << "row " << r;
  }
};

TEST_F(GroupedChecked, ValidInputsPass) { EXPECT_TRUE(grouped_linear_ref(pr.params()).ok()); }
TEST_F(GroupedChecked, FirstOffsetNotZero) {
  pr.offsets[0] = 1;
  expect_out_of_range("offsets[0] = 1");
}
TEST_F(GroupedChecked, DecreasingOffsets) {
  pr.offsets[2] = 1;
  expect_out_of_range("offsets[2] = 1");
}
TEST_F(GroupedChecked, LastOffsetBeyondCapacity) {
  pr.offsets[3] = 7;
  expect_out_of_range("offsets[3] = 7");
}
TEST_F(GroupedChecked, XRowOutOfRange) {
  pr.x_row[3] = 5;
  expect_out_of_range("x_row[3] = 5");
}
TEST_F(GroupedChecked, NegativeXRow) {
  pr.x_row[0] = -1;
  expect_out_of_range("x_row[0] = -1");
}
TEST_F(GroupedChecked, YRowOutOfRange) {
  pr.y_row[4] = 6;
  expect_out_of_range("y_row[4] = 6");
}
TEST_F(GroupedChecked, IdentityXRowBeyondXRows) {
  pr.x_row.clear();  // pair i reads row i; x has 5 rows, pair 4 is the last dispatched
  pr.offsets[3] = 6;
  expect_out_of_range("x_row[5] = 5");
}
TEST_F(GroupedChecked, NullWeightOfAGroupWithPairs) {
  pr.weights[1] = nullptr;
  expect_out_of_range("weights[1] is null");
}
TEST_F(GroupedChecked, SpareEntriesAreNotChecked) {
  pr.x_row[5] = -9;  // pair 5 is past offsets[3] = 5
  pr.y_row[5] = 1000;
  EXPECT_TRUE(grouped_linear_ref(pr.params()).ok());
}

// Unchecked: a pair with a bad index is skipped, the others are computed; offsets are clamped
// into [0, capacity] and made non-decreasing.
TEST(GroupedLinear, UncheckedNeutralises) {
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Problem pr(rng, 2, 16, 8, 4, 6);
  pr.capacity = 4;
  pr.offsets = {0, 2, 9};  // clamped to 4
  pr.x_row = {0, 7, 2, 3};
  pr.y_row = {0, 1, 2, -3};
  ASSERT_TRUE(grouped_linear_ref(pr.params()).ok());
  EXPECT_TRUE(pr.row_equals(0, pr.linear_row(0, 0)));
  EXPECT_TRUE(pr.row_poisoned(1));  // x_row 7 >= x_rows: skipped
  EXPECT_TRUE(pr.row_equals(2, pr.linear_row(1, 2)));
  for (int32_t r = 3; r < 6; ++r) EXPECT_TRUE(pr.row_poisoned(r));  // y_row -3: skipped

  // offsets {-4, 3, 1}: eff = {0, 3, 3}: group 0 takes pairs 0..2, group 1 none.
  Problem q(rng, 2, 16, 8, 4, 4);
  q.capacity = 4;
  q.offsets = {-4, 3, 1};
  ASSERT_TRUE(grouped_linear_ref(q.params()).ok());
  for (int32_t r = 0; r < 3; ++r) EXPECT_TRUE(q.row_equals(r, q.linear_row(0, r))) << r;
  EXPECT_TRUE(q.row_poisoned(3));
}

// One test per host rule; the message names the argument and value.
struct GroupedValidation : ::testing::Test {
  Rng rng{testing::test_seed()};
  Problem pr{rng, 2, 16, 8, 3, 3};
  GroupedLinearParams p;
  void SetUp() override {
    pr.capacity = 3;
    pr.offsets = {0, 1, 3};
    p = pr.params();
  }
  void expect_invalid(const std::string& text) {
    const Status s = grouped_linear_ref(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(text), std::string::npos) << s.to_string();
  }
};

TEST_F(GroupedValidation, ValidInputsPass) { EXPECT_TRUE(grouped_linear_ref(p).ok()); }
TEST_F(GroupedValidation, NullWeights) {
  p.weights = nullptr;
  expect_invalid("weights and weights_fp8 are both null");
}
TEST_F(GroupedValidation, NullOffsets) {
  p.offsets = nullptr;
  expect_invalid("offsets is null");
}
TEST_F(GroupedValidation, NoGroups) {
  p.num_groups = 0;
  expect_invalid("num_groups = 0");
}
TEST_F(GroupedValidation, NegativeCapacity) {
  p.capacity = -1;
  expect_invalid("capacity = -1");
}
TEST_F(GroupedValidation, NegativeMaxGroupPairs) {
  p.max_group_pairs = -1;
  expect_invalid("max_group_pairs = -1");
}
TEST_F(GroupedValidation, ZeroInFeatures) {
  p.in_features = 0;
  expect_invalid("in_features = 0");
}
TEST_F(GroupedValidation, InFeaturesNotAMultipleOf8) {
  p.in_features = 12;
  expect_invalid("in_features = 12");
}
TEST_F(GroupedValidation, ZeroOutFeatures) {
  p.out_features = 0;
  expect_invalid("out_features = 0");
}
TEST_F(GroupedValidation, NegativeXRows) {
  p.x_rows = -1;
  expect_invalid("x_rows = -1");
}
TEST_F(GroupedValidation, NegativeYRows) {
  p.y_rows = -2;
  expect_invalid("y_rows = -2");
}
TEST_F(GroupedValidation, NullX) {
  p.x = nullptr;
  expect_invalid("x is null");
}
TEST_F(GroupedValidation, NullY) {
  p.y = nullptr;
  expect_invalid("y is null");
}

}  // namespace
}  // namespace dsa::kernels
