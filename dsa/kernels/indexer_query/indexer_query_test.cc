// The fused indexer query op's reference (SPEC.md §8.5): bit-identical to the separate references
// it replaces (copy, rope_ref, hadamard_ref, indexer_q_quant_ref) at V3.2 and tiny head counts,
// both rope styles, dense and strided q; its check passes on it and catches broken ops; the host
// validation; the edge rules (no tokens, a zero head, a position outside the table).
#include "dsa/kernels/indexer_query/indexer_query.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/indexer_query/indexer_query_check.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

constexpr int32_t kPositions = 4096;

struct Tables {
  std::vector<float> cos = std::vector<float>(size_t(kPositions) * kRopePairs);
  std::vector<float> sin = std::vector<float>(size_t(kPositions) * kRopePairs);
  Tables() {
    const Status s = rope_table_ref({RopeConfig{}, kPositions, cos.data(), sin.data()});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
};

// One case: T tokens of H heads, `before` / `after` other columns around the heads of each row.
struct Case {
  int32_t tokens, heads;
  int64_t before, after;
  RopeStyle style;

  int64_t ld() const { return before + int64_t{heads} * kIndexHeadDim + after; }
  int64_t blocks() const { return int64_t{tokens} * heads; }
};

struct Inputs {
  std::vector<bf16> buf;  // [T, ld]; q starts `before` into it
  std::vector<int32_t> pos;
  std::vector<float> w;
};

Inputs random_inputs(const Case& c, Rng& rng) {
  Inputs in;
  in.buf.resize(size_t(c.tokens) * size_t(c.ld()));
  for (int64_t b = 0; b < c.blocks(); ++b) {
    const float scale = std::ldexp(1.f, int(rng.randint(-8, 8)));
    bf16* x = &in.buf[size_t(b / c.heads) * size_t(c.ld()) + size_t(c.before) +
                      size_t(b % c.heads) * kIndexHeadDim];
    for (int32_t k = 0; k < kIndexHeadDim; ++k) x[k] = float_to_bf16(rng.normal() * scale);
  }
  for (int32_t t = 0; t < c.tokens; ++t) {  // sentinels around the heads
    bf16* x = &in.buf[size_t(t) * size_t(c.ld())];
    for (int64_t j = 0; j < c.before; ++j) x[j] = float_to_bf16(rng.normal() * 4096.f);
    for (int64_t j = c.ld() - c.after; j < c.ld(); ++j) x[j] = float_to_bf16(rng.normal() * 4096.f);
  }
  in.pos.resize(size_t(c.tokens));
  for (auto& p : in.pos) p = int32_t(rng.randint(0, kPositions - 1));
  in.w = rng.normal_vector(size_t(c.blocks()));
  return in;
}

// A poison for outputs: random bytes, different from call to call.
std::vector<uint8_t> random_bytes(Rng& rng, size_t n) {
  std::vector<uint8_t> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.push_back(uint8_t(rng.randint(0, 255)));
  return v;
}

IndexerQueryParams params(const Case& c, const Inputs& in, const Tables& tab, uint8_t* q8,
                          float* w) {
  IndexerQueryParams p;
  p.q = in.buf.data() + c.before;
  p.q_token_stride = c.ld();
  p.q8 = q8;
  p.w = w;
  p.num_tokens = c.tokens;
  p.num_heads = c.heads;
  p.fold = static_cast<float>(1.0 / std::sqrt(double(c.heads) * kIndexHeadDim));
  p.style = c.style;
  p.positions = in.pos.data();
  p.cos = tab.cos.data();
  p.sin = tab.sin.data();
  p.num_positions = kPositions;
  return p;
}

// The model's unfused CPU path (run_query_separately, its params written out independently of
// the reference): the heads copied to a dense buffer, rope_ref, hadamard_ref, indexer_q_quant_ref.
Status unfused(const IndexerQueryParams& p) {
  std::vector<bf16> q(size_t(p.num_tokens) * size_t(p.num_heads) * kIndexHeadDim);
  return run_query_separately(p, q.data(),
                              {copy_rows_host, rope_ref, hadamard_ref, indexer_q_quant_ref});
}

// Runs the fused reference and the unfused path on the same inputs (outputs poisoned with
// different random bytes) and requires every code and weight bit-identical, q untouched.
void expect_fused_equals_unfused(const Case& c, uint64_t seed) {
  Rng rng(seed);
  const Tables tab;
  const Inputs in = random_inputs(c, rng);
  const std::vector<bf16> buf0 = in.buf;
  const size_t n8 = size_t(c.blocks()) * kIndexHeadDim;
  std::vector<uint8_t> got8 = random_bytes(rng, n8), want8 = random_bytes(rng, n8);
  std::vector<float> got_w = in.w, want_w = in.w;
  const std::string what = "T=" + std::to_string(c.tokens) + " H=" + std::to_string(c.heads) +
                           (c.style == RopeStyle::kInterleaved ? " interleaved" : " non-int.") +
                           " ld=" + std::to_string(c.ld());
  Status s = indexer_query_ref(params(c, in, tab, got8.data(), got_w.data()));
  ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
  s = unfused(params(c, in, tab, want8.data(), want_w.data()));
  ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
  EXPECT_EQ(testing::first_bit_difference(got8, want8), "") << what << " (codes)";
  EXPECT_EQ(testing::first_bit_difference(got_w, want_w), "") << what << " (weights)";
  EXPECT_EQ(testing::first_bit_difference(in.buf, buf0), "") << what << ": q was written";
  int64_t scaled = 0;  // every weight took its fold and scale
  for (size_t b = 0; b < got_w.size(); ++b) scaled += got_w[b] != in.w[b];
  EXPECT_EQ(scaled, c.blocks()) << what;
}

TEST(IndexerQuery, ReferenceEqualsSeparateReferences) {
  const uint64_t seed = testing::test_seed();
  int n = 0;
  for (int32_t tokens : {1, 7, 64})
    for (int32_t heads : {64, 16})
      for (RopeStyle style : {RopeStyle::kNonInterleaved, RopeStyle::kInterleaved}) {
        expect_fused_equals_unfused({tokens, heads, 0, 0, style}, seed + n++);  // dense (wq_b)
        // Strided: the indexer's heads after q_b's columns of the fused q_b + wq_b output.
        expect_fused_equals_unfused({tokens, heads, int64_t{heads} * 192, 64, style}, seed + n++);
      }
}

TEST(IndexerQuery, CheckPassesOnReference) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, heads] : {std::pair{1, 64}, {7, 16}, {64, 64}, {33, 1}}) {
    const Status s = check_indexer_query(indexer_query_ref, tokens, heads, seed + tokens);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " H=" << heads << ": " << s.to_string();
  }
}

// Broken variants of the reference, each of which the check must refuse.
Status wrong_style(const IndexerQueryParams& p) {
  IndexerQueryParams q = p;
  q.style =
      p.style == RopeStyle::kInterleaved ? RopeStyle::kNonInterleaved : RopeStyle::kInterleaved;
  return indexer_query_ref(q);
}
Status one_code_off(const IndexerQueryParams& p) {
  DSA_RETURN_IF_ERROR(indexer_query_ref(p));
  const int64_t i = (int64_t{p.num_tokens} * p.num_heads - 1) * kIndexHeadDim + 77;
  p.q8[i] = uint8_t(p.q8[i] + 2);  // two e4m3 steps (or a NaN, or the other sign)
  return ok_status();
}
Status weight_unscaled(const IndexerQueryParams& p) {
  std::vector<float> w(p.w, p.w + int64_t{p.num_tokens} * p.num_heads);
  DSA_RETURN_IF_ERROR(indexer_query_ref(p));
  p.w[0] = w[0];  // neither the fold nor the scale
  return ok_status();
}
Status no_rope(const IndexerQueryParams& p) {
  IndexerQueryParams q = p;
  std::vector<int32_t> zeros(size_t(p.num_tokens), 0);
  q.positions = zeros.data();  // position 0: the identity rotation
  return indexer_query_ref(q);
}
Status reads_before_heads(const IndexerQueryParams& p) {
  IndexerQueryParams q = p;
  q.q = p.q - kIndexHeadDim;  // one head early: the sentinels
  return indexer_query_ref(q);
}

TEST(IndexerQuery, CheckCatchesBrokenOps) {
  const uint64_t seed = testing::test_seed();
  for (auto [name, op] : {std::pair{"wrong style", &wrong_style},
                          {"one code off", &one_code_off},
                          {"weight unscaled", &weight_unscaled},
                          {"no rope", &no_rope},
                          {"reads before the heads", &reads_before_heads}}) {
    const Status s = check_indexer_query(op, 9, 16, seed);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << name << ": " << s.to_string();
  }
}

TEST(IndexerQuery, ZeroTokensDoNothing) {
  IndexerQueryParams p;  // every pointer null
  p.num_heads = 64;
  p.q_token_stride = 64 * kIndexHeadDim;
  p.fold = 0.01f;
  EXPECT_TRUE(indexer_query_ref(p).ok());
  EXPECT_TRUE(validate(p).ok());
}

// An all-zero head: every code zero, and the scale the §2.1 rule gives amax 0 (the floor 1e-4:
// ceil(log2(1e-4 / 448)) = ceil(-22.09) = -22), so w = w * fold * 2^-22. Its neighbour is
// quantised as usual.
TEST(IndexerQuery, ZeroHeadGivesZeroCodesAndFloorScale) {
  Rng rng(testing::test_seed());
  const Tables tab;
  const Case c{3, 2, 0, 0, RopeStyle::kNonInterleaved};
  Inputs in = random_inputs(c, rng);
  const int64_t zero_block = 3;  // token 1, head 1
  std::fill_n(in.buf.begin() + zero_block * kIndexHeadDim, kIndexHeadDim, float_to_bf16(0.f));
  in.pos = {0, 1234, 4095};
  std::vector<uint8_t> q8(size_t(c.blocks()) * kIndexHeadDim, 0xEE);
  std::vector<float> w = in.w;
  ASSERT_TRUE(indexer_query_ref(params(c, in, tab, q8.data(), w.data())).ok());
  for (int32_t k = 0; k < kIndexHeadDim; ++k) {
    const uint8_t code = q8[size_t(zero_block) * kIndexHeadDim + size_t(k)];
    EXPECT_EQ(code & 0x7F, 0) << "value " << k << ": code " << int(code);
  }
  EXPECT_EQ(pow2_scale_exponent(0.f), -22);
  const float fold = params(c, in, tab, nullptr, nullptr).fold;
  EXPECT_EQ(w[size_t(zero_block)], in.w[size_t(zero_block)] * fold * std::ldexp(1.f, -22));
  int nonzero = 0;  // the other heads are not zero
  for (int32_t k = 0; k < kIndexHeadDim; ++k) nonzero += (q8[size_t(k)] & 0x7F) != 0;
  EXPECT_GT(nonzero, 64);
}

// A position outside the table: checked, OutOfRange naming it, nothing written; unchecked, the
// token's heads unrotated, exactly as the unfused path leaves them.
TEST(IndexerQuery, PositionOutsideTable) {
  Rng rng(testing::test_seed());
  const Tables tab;
  for (RopeStyle style : {RopeStyle::kNonInterleaved, RopeStyle::kInterleaved}) {
    const Case c{4, 16, 64, 0, style};
    Inputs in = random_inputs(c, rng);
    in.pos[2] = kPositions;
    const size_t n8 = size_t(c.blocks()) * kIndexHeadDim;
    {
      ScopedCheckedMode checked(true);
      std::vector<uint8_t> q8(n8, 0xEE);
      std::vector<float> w = in.w;
      const Status s = indexer_query_ref(params(c, in, tab, q8.data(), w.data()));
      EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
      EXPECT_NE(s.message().find("indexer_query: positions[2] = 4096"), std::string::npos)
          << s.to_string();
      EXPECT_EQ(testing::first_bit_difference(q8, std::vector<uint8_t>(n8, 0xEE)), "");
      EXPECT_EQ(testing::first_bit_difference(w, in.w), "");
    }
    ScopedCheckedMode unchecked(false);
    for (int32_t bad : {kPositions, -1, INT32_MIN}) {
      in.pos[2] = bad;
      std::vector<uint8_t> got8(n8, 0xEE), want8(n8, 0x11), rotated8(n8, 0x22);
      std::vector<float> got_w = in.w, want_w = in.w, rotated_w = in.w;
      ASSERT_TRUE(indexer_query_ref(params(c, in, tab, got8.data(), got_w.data())).ok());
      ASSERT_TRUE(unfused(params(c, in, tab, want8.data(), want_w.data())).ok());
      EXPECT_EQ(testing::first_bit_difference(got8, want8), "") << bad;
      EXPECT_EQ(testing::first_bit_difference(got_w, want_w), "") << bad;
      // And unrotated is not what a rotation gives (at position 1): the case can fail.
      in.pos[2] = 1;
      ASSERT_TRUE(indexer_query_ref(params(c, in, tab, rotated8.data(), rotated_w.data())).ok());
      EXPECT_NE(testing::first_bit_difference(got8, rotated8), "") << bad;
    }
  }
}

TEST(IndexerQuery, ValidateRejectsEachField) {
  const int32_t T = 2, H = 4;
  const int64_t ld = int64_t{H} * kIndexHeadDim + 64;
  // q inside a larger arena, so q8 can be placed against either end of q's byte range.
  const int64_t q_span = 2 * ((T - 1) * ld + H * kIndexHeadDim);  // bytes from q's first head
  const int64_t q8_size = int64_t{T} * H * kIndexHeadDim;
  std::vector<bf16> arena(size_t(q_span + 2 * q8_size + 64));
  uint8_t* const q_bytes = reinterpret_cast<uint8_t*>(arena.data()) + q8_size + 64;
  std::vector<uint8_t> q8(static_cast<size_t>(q8_size));
  std::vector<float> w(size_t(T) * H);
  std::vector<int32_t> pos(size_t(T), 0);
  std::vector<float> table(kRopePairs, 1.f);
  IndexerQueryParams valid;
  valid.q = reinterpret_cast<const bf16*>(q_bytes);
  valid.q_token_stride = ld;
  valid.q8 = q8.data();
  valid.w = w.data();
  valid.num_tokens = T;
  valid.num_heads = H;
  valid.fold = 0.5f;
  valid.positions = pos.data();
  valid.cos = table.data();
  valid.sin = table.data();
  valid.num_positions = 1;
  using P = IndexerQueryParams;
  const auto bad = StatusCode::kInvalidArgument;
  // validate() alone: the rows that place q8 next to q pass it but own no q8 of their own.
  testing::expect_rejects(
      valid, [](const P& p) { return validate(p); },
      {{"valid", [](P&) {}, StatusCode::kOk},
       {"num_tokens", [](P& p) { p.num_tokens = -1; }, bad, "indexer_query: num_tokens = -1"},
       {"num_heads", [](P& p) { p.num_heads = 0; }, bad, "indexer_query: num_heads = 0"},
       {"q_token_stride", [&](P& p) { p.q_token_stride = H * kIndexHeadDim - 1; }, bad,
        "indexer_query: q_token_stride = 511"},
       {"T * H", [](P& p) { p.num_tokens = 1 << 26, p.num_heads = 64, p.q_token_stride = 8192; },
        bad, "num_tokens * num_heads"},
       {"fold 0", [](P& p) { p.fold = 0.f; }, bad, "indexer_query: fold = 0"},
       {"fold < 0", [](P& p) { p.fold = -1.f; }, bad, "fold = -1"},
       {"fold NaN", [](P& p) { p.fold = NAN; }, bad, "fold = nan"},
       {"fold inf", [](P& p) { p.fold = INFINITY; }, bad, "fold = inf"},
       {"style", [](P& p) { p.style = static_cast<RopeStyle>(7); }, bad, "style = 7"},
       {"num_positions", [](P& p) { p.num_positions = 0; }, bad, "num_positions = 0"},
       {"q", [](P& p) { p.q = nullptr; }, bad, "indexer_query: q is null"},
       {"q8", [](P& p) { p.q8 = nullptr; }, bad, "indexer_query: q8 is null"},
       {"w", [](P& p) { p.w = nullptr; }, bad, "indexer_query: w is null"},
       {"positions", [](P& p) { p.positions = nullptr; }, bad, "positions is null"},
       {"cos", [](P& p) { p.cos = nullptr; }, bad, "cos is null"},
       {"sin", [](P& p) { p.sin = nullptr; }, bad, "sin is null"},
       {"q8 in q's gap", [&](P& p) { p.q8 = q_bytes + 2 * (H * kIndexHeadDim) + 1; }, bad, "q8 = "},
       {"q8 over q's end", [&](P& p) { p.q8 = q_bytes + q_span - 1; }, bad, "overlaps q"},
       {"q8 into q's start", [&](P& p) { p.q8 = q_bytes - q8_size + 1; }, bad, "overlaps q"},
       {"q8 just before q", [&](P& p) { p.q8 = q_bytes - q8_size; }, StatusCode::kOk},
       {"q8 just after q", [&](P& p) { p.q8 = q_bytes + q_span; }, StatusCode::kOk},
       {"w in q", [&](P& p) { p.w = reinterpret_cast<float*>(q_bytes + 16); }, bad,
        "indexer_query: w = "},
       {"w in q8", [&](P& p) { p.w = reinterpret_cast<float*>(q8.data() + 16); }, bad,
        "overlaps q8"},
       {"no tokens", [](P& p) { p.num_tokens = 0, p.q = nullptr, p.num_positions = 0; },
        StatusCode::kOk}});
  // The reference validates first: nothing is written for a bad field.
  IndexerQueryParams p = valid;
  p.fold = 0.f;
  std::vector<uint8_t> poison(q8.size(), 0xEE);
  q8 = poison;
  EXPECT_EQ(indexer_query_ref(p).code(), bad);
  EXPECT_EQ(testing::first_bit_difference(q8, poison), "");
}

}  // namespace
}  // namespace dsa::kernels
