// CPU tests of the attention prologue (SPEC.md §8.4, §8.5 steps 2-3): the reference is the unfused
// sequence of CPU ops bit for bit, in the fused-projection layout and in three buffers of their own
// strides, both index RoPE styles; the check entry passes on it and fails on broken ops; the
// validation names each bad field; positions outside the table.
#include "dsa/kernels/attention_prologue/attention_prologue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/attention_prologue/attention_prologue_check.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using testing::first_bit_difference;

constexpr size_t kTail = 40;  // poisoned elements past cq's and k's rows

Status separate_refs(const AttentionPrologueParams& p) {
  return run_prologue_separately(p, {rmsnorm_ref, rope_ref, layernorm_ref, hadamard_ref});
}

// One case's buffers: the fused layout (one [T, ld] buffer of [qa | k_raw | latent]) or three
// buffers of their own, each row padded past its width with random values that must survive.
// Copyable: a copy runs on its own buffers.
struct Case {
  AttentionPrologueInputs in;
  bool fused = true;
  RopeStyle style = RopeStyle::kNonInterleaved;
  int64_t qa_ld = 0, k_raw_ld = 0, latent_ld = 0;
  std::vector<bf16> rows;               // fused
  std::vector<bf16> qa, k_raw, latent;  // separate
  std::vector<bf16> cq, k;

  Case(int32_t tokens, int32_t q_lora, RopeStyle s, bool fused_layout, uint64_t seed)
      : fused(fused_layout), style(s) {
    auto inputs = attention_prologue_inputs(tokens, q_lora, seed);
    EXPECT_TRUE(inputs.ok()) << inputs.status().to_string();
    in = std::move(inputs).value();
    const size_t T = size_t(tokens);
    cq.assign(T * q_lora + kTail, float_to_bf16(NAN));
    k.assign(T * kIndexHeadDim + kTail, float_to_bf16(NAN));
    if (fused) {
      rows = in.rows;
      qa_ld = k_raw_ld = latent_ld = in.ld;
      return;
    }
    testing::Rng rng(seed + 1);
    qa_ld = q_lora + 3, k_raw_ld = kIndexHeadDim + 5, latent_ld = kQkDim + 7;
    qa = rng.bf16_vector(T * size_t(qa_ld), 3.f);
    k_raw = rng.bf16_vector(T * size_t(k_raw_ld), 3.f);
    latent = rng.bf16_vector(T * size_t(latent_ld), 3.f);
    for (size_t t = 0; t < T; ++t) {
      const bf16* row = &in.rows[t * size_t(in.ld)];
      std::memcpy(&qa[t * qa_ld], row + in.qa_col(), size_t(q_lora) * sizeof(bf16));
      std::memcpy(&k_raw[t * k_raw_ld], row + in.k_raw_col(), kIndexHeadDim * sizeof(bf16));
      std::memcpy(&latent[t * latent_ld], row + in.latent_col(), kQkDim * sizeof(bf16));
    }
  }

  AttentionPrologueParams params() {
    AttentionPrologueParams p;
    p.num_tokens = in.tokens;
    p.qa = fused ? rows.data() + in.qa_col() : qa.data();
    p.qa_ld = qa_ld;
    p.q_a_norm_w = in.q_a_norm_w.data();
    p.cq = cq.data();
    p.q_lora = in.q_lora;
    p.latent = fused ? rows.data() + in.latent_col() : latent.data();
    p.latent_ld = latent_ld;
    p.kv_a_norm_w = in.kv_a_norm_w.data();
    p.k_raw = fused ? rows.data() + in.k_raw_col() : k_raw.data();
    p.k_raw_ld = k_raw_ld;
    p.k_norm_w = in.k_norm_w.data();
    p.k_norm_b = in.k_norm_b.data();
    p.k = k.data();
    p.index_rope_style = style;
    p.positions = in.positions.data();
    p.cos = in.cos.data();
    p.sin = in.sin.data();
    p.num_positions = in.num_positions;
    return p;
  }
};

// Every buffer of `got` bit-equal to `want`'s.
void expect_same_buffers(const Case& got, const Case& want, const std::string& what) {
  EXPECT_EQ(first_bit_difference(got.cq, want.cq), "") << what << ": cq";
  EXPECT_EQ(first_bit_difference(got.k, want.k), "") << what << ": k";
  EXPECT_EQ(first_bit_difference(got.rows, want.rows), "") << what << ": rows";
  EXPECT_EQ(first_bit_difference(got.qa, want.qa), "") << what << ": qa";
  EXPECT_EQ(first_bit_difference(got.k_raw, want.k_raw), "") << what << ": k_raw";
  EXPECT_EQ(first_bit_difference(got.latent, want.latent), "") << what << ": latent";
}

TEST(AttentionPrologue, ReferenceIsTheSeparateReferencesBitForBit) {
  const uint64_t seed = testing::test_seed();
  uint64_t n = 0;
  for (int32_t T : {1, 5, 33}) {
    for (int32_t q_lora : {128, 1536}) {
      for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
        for (bool fused : {true, false}) {
          const std::string what =
              "T=" + std::to_string(T) + " q_lora=" + std::to_string(q_lora) +
              (style == RopeStyle::kInterleaved ? " interleaved" : " non-int.") +
              (fused ? " fused layout" : " separate buffers");
          Case got(T, q_lora, style, fused, seed + n++);
          Case want = got;
          const Case before = got;
          ASSERT_TRUE(attention_prologue_ref(got.params()).ok()) << what;
          ASSERT_TRUE(separate_refs(want.params()).ok()) << what;
          expect_same_buffers(got, want, what);
          // Not vacuous: the outputs were written and the latent rows changed.
          EXPECT_FALSE(std::isnan(bf16_to_float(got.cq[0]))) << what;
          EXPECT_FALSE(std::isnan(bf16_to_float(got.k[size_t(T) * 128 - 1]))) << what;
          EXPECT_NE(first_bit_difference(got.rows, before.rows) +
                        first_bit_difference(got.latent, before.latent),
                    "")
              << what;
        }
      }
    }
  }
}

TEST(AttentionPrologue, CheckPassesOnReference) {
  const uint64_t seed = testing::test_seed();
  for (auto [T, q_lora] : {std::pair{1, 1536}, {5, 128}, {33, 100}, {17, 1536}}) {
    Status s = check_attention_prologue(attention_prologue_ref, T, q_lora, seed + q_lora);
    EXPECT_TRUE(s.ok()) << "T=" << T << " q_lora=" << q_lora << ": " << s.to_string();
  }
}

// The check can fail: each of these ops breaks one promise.
TEST(AttentionPrologue, CheckCatchesBrokenOps) {
  const uint64_t seed = testing::test_seed();
  struct Broken {
    const char* what;
    AttentionPrologueFn op;
  } broken[] = {
      {"k off by 2 ulps",
       +[](const AttentionPrologueParams& p) {
         DSA_RETURN_IF_ERROR(attention_prologue_ref(p));
         p.k[7].bits += 2;
         return ok_status();
       }},
      {"cq off by 2 ulps",
       +[](const AttentionPrologueParams& p) {
         DSA_RETURN_IF_ERROR(attention_prologue_ref(p));
         p.cq[p.q_lora + 3].bits += 2;
         return ok_status();
       }},
      {"latent k_pe off by 2 ulps",
       +[](const AttentionPrologueParams& p) {
         DSA_RETURN_IF_ERROR(attention_prologue_ref(p));
         p.latent[p.latent_ld + 570].bits += 2;
         return ok_status();
       }},
      {"the other rope style",
       +[](const AttentionPrologueParams& p) {
         AttentionPrologueParams q = p;
         q.index_rope_style = p.index_rope_style == RopeStyle::kInterleaved
                                  ? RopeStyle::kNonInterleaved
                                  : RopeStyle::kInterleaved;
         return attention_prologue_ref(q);
       }},
      {"no Hadamard",
       +[](const AttentionPrologueParams& p) {
         DSA_RETURN_IF_ERROR(attention_prologue_ref(p));
         return hadamard_ref({p.k, p.k, p.num_tokens});  // the transform is an involution
       }},
      {"a write past cq",
       +[](const AttentionPrologueParams& p) {
         DSA_RETURN_IF_ERROR(attention_prologue_ref(p));
         p.cq[int64_t{p.num_tokens} * p.q_lora] = float_to_bf16(0.f);
         return ok_status();
       }},
      {"a write to k_raw",
       +[](const AttentionPrologueParams& p) {
         DSA_RETURN_IF_ERROR(attention_prologue_ref(p));
         const_cast<bf16*>(p.k_raw)[1] = float_to_bf16(0.f);
         return ok_status();
       }},
  };
  for (const Broken& b : broken) {
    Status s = check_attention_prologue(b.op, 5, 128, seed);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << b.what << ": " << s.to_string();
  }
}

// Unchecked, a position outside the table leaves that token's rows unrotated (the unfused ops'
// rule); checked, it is OutOfRange naming the token.
TEST(AttentionPrologue, PositionOutsideTheTable) {
  const uint64_t seed = testing::test_seed();
  for (int32_t bad : {-1, 4096 + 4, INT32_MIN}) {
    Case c(4, 128, RopeStyle::kNonInterleaved, /*fused_layout=*/true, seed);
    c.in.positions[2] = bad;
    {
      ScopedCheckedMode checked(true);
      Status s = attention_prologue_ref(c.params());
      EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
      EXPECT_NE(s.message().find("positions[2] = " + std::to_string(bad)), std::string::npos)
          << s.to_string();
    }
    ScopedCheckedMode unchecked(false);
    Case got(4, 128, RopeStyle::kNonInterleaved, true, seed);
    got.in.positions[1] = 5;  // rotated (position 0 would be the identity)
    got.in.positions[2] = bad;
    Case want = got;
    ASSERT_TRUE(attention_prologue_ref(got.params()).ok());
    ASSERT_TRUE(separate_refs(want.params()).ok());
    expect_same_buffers(got, want, "unchecked, position " + std::to_string(bad));
    // Token 2's k_pe is the input's; token 1's was rotated.
    const int64_t pe = 2 * got.in.ld + got.in.latent_col() + 512;
    for (int64_t j = 0; j < 64; ++j)
      EXPECT_EQ(got.rows[pe + j].bits, got.in.rows[pe + j].bits) << j;
    EXPECT_NE(first_bit_difference(std::vector<bf16>(got.rows.begin() + pe - got.in.ld,
                                                     got.rows.begin() + pe - got.in.ld + 64),
                                   std::vector<bf16>(got.in.rows.begin() + pe - got.in.ld,
                                                     got.in.rows.begin() + pe - got.in.ld + 64)),
              "");
  }
}

TEST(AttentionPrologue, ValidationNamesTheField) {
  Case c(3, 128, RopeStyle::kNonInterleaved, /*fused_layout=*/false, testing::test_seed());
  const AttentionPrologueParams valid = c.params();
  const auto validate_fn = [](const AttentionPrologueParams& p) { return validate(p); };
  using P = AttentionPrologueParams;
  const auto kBad = StatusCode::kInvalidArgument;
  testing::expect_rejects<P>(
      valid, validate_fn,
      {{"valid", [](P&) {}, StatusCode::kOk},
       {"num_tokens", [](P& p) { p.num_tokens = -1; }, kBad, "num_tokens = -1"},
       {"q_lora", [](P& p) { p.q_lora = 0; }, kBad, "q_lora = 0"},
       {"qa_ld", [](P& p) { p.qa_ld = 127; }, kBad, "qa_ld = 127"},
       {"latent_ld", [](P& p) { p.latent_ld = 575; }, kBad, "latent_ld = 575"},
       {"k_raw_ld", [](P& p) { p.k_raw_ld = 127; }, kBad, "k_raw_ld = 127"},
       {"index_rope_style", [](P& p) { p.index_rope_style = static_cast<RopeStyle>(7); }, kBad,
        "index_rope_style = 7"},
       {"rms_eps 0", [](P& p) { p.rms_eps = 0.f; }, kBad, "rms_eps = 0"},
       {"rms_eps < 0", [](P& p) { p.rms_eps = -1e-6f; }, kBad, "rms_eps"},
       {"rms_eps NaN", [](P& p) { p.rms_eps = NAN; }, kBad, "rms_eps = nan"},
       {"rms_eps inf", [](P& p) { p.rms_eps = INFINITY; }, kBad, "rms_eps = inf"},
       {"layernorm_eps 0", [](P& p) { p.layernorm_eps = 0.f; }, kBad, "layernorm_eps = 0"},
       {"layernorm_eps NaN", [](P& p) { p.layernorm_eps = NAN; }, kBad, "layernorm_eps = nan"},
       {"num_positions", [](P& p) { p.num_positions = 0; }, kBad, "num_positions = 0"},
       {"qa", [](P& p) { p.qa = nullptr; }, kBad, "qa is null"},
       {"q_a_norm_w", [](P& p) { p.q_a_norm_w = nullptr; }, kBad, "q_a_norm_w is null"},
       {"cq", [](P& p) { p.cq = nullptr; }, kBad, "cq is null"},
       {"latent", [](P& p) { p.latent = nullptr; }, kBad, "latent is null"},
       {"kv_a_norm_w", [](P& p) { p.kv_a_norm_w = nullptr; }, kBad, "kv_a_norm_w is null"},
       {"k_raw", [](P& p) { p.k_raw = nullptr; }, kBad, "k_raw is null"},
       {"k_norm_w", [](P& p) { p.k_norm_w = nullptr; }, kBad, "k_norm_w is null"},
       {"k_norm_b", [](P& p) { p.k_norm_b = nullptr; }, kBad, "k_norm_b is null"},
       {"k", [](P& p) { p.k = nullptr; }, kBad, "k is null"},
       {"positions", [](P& p) { p.positions = nullptr; }, kBad, "positions is null"},
       {"cos", [](P& p) { p.cos = nullptr; }, kBad, "cos is null"},
       {"sin", [](P& p) { p.sin = nullptr; }, kBad, "sin is null"},
       {"cq overlapping qa", [](P& p) { p.cq = const_cast<bf16*>(p.qa) + 300; }, kBad,
        "overlaps qa's rows"},
       {"cq on qa's last row end", [](P& p) { p.cq = const_cast<bf16*>(p.qa) + 2 * p.qa_ld + 127; },
        kBad, "overlaps qa's rows"},
       {"k overlapping k_raw", [](P& p) { p.k = const_cast<bf16*>(p.k_raw) + 1; }, kBad, "k = "},
       {"k overlapping k_raw (named)", [](P& p) { p.k = const_cast<bf16*>(p.k_raw) + 1; }, kBad,
        "overlaps k_raw's rows"},
       {"k overlapping latent", [](P& p) { p.k = p.latent + 700; }, kBad, "overlaps latent's rows"},
       {"cq overlapping k", [](P& p) { p.cq = p.k + 10; }, kBad, "overlaps k's rows"},
       {"k in place of k_raw", [](P& p) { p.k = const_cast<bf16*>(p.k_raw); }, kBad,
        "k must be a buffer of its own"}});
  // The op validates before it touches anything.
  P bad = valid;
  bad.k = const_cast<bf16*>(bad.k_raw);
  EXPECT_EQ(attention_prologue_ref(bad).code(), kBad);
  // The overlap bound is exact: cq may start right past qa's last row, not one element before.
  std::vector<bf16> one(size_t(2 * valid.qa_ld + valid.q_lora) + 3 * size_t(valid.q_lora));
  P edge = valid;
  edge.qa = one.data();
  edge.cq = one.data() + 2 * valid.qa_ld + valid.q_lora;
  EXPECT_TRUE(validate(edge).ok()) << validate(edge).to_string();
  edge.cq -= 1;
  EXPECT_EQ(validate(edge).code(), kBad);
  // The latent, written in place, against qa and k_raw: separate buffers must miss each other, and
  // column ranges of one buffer (the fused layout) must share its stride and miss each other's
  // columns.
  P sep = valid;
  sep.latent = const_cast<bf16*>(sep.qa) + 10;
  EXPECT_NE(validate(sep).to_string().find("latent = "), std::string::npos)
      << validate(sep).to_string();
  Case f(3, 128, RopeStyle::kNonInterleaved, /*fused_layout=*/true, testing::test_seed());
  const P fused = f.params();
  EXPECT_TRUE(validate(fused).ok()) << validate(fused).to_string();
  P cols = fused;
  cols.latent = const_cast<bf16*>(cols.k_raw) + 64;  // its first 64 columns over k_raw's last
  EXPECT_NE(validate(cols).to_string().find("columns clear of k_raw's"), std::string::npos)
      << validate(cols).to_string();
  cols = fused;
  cols.latent_ld = fused.latent_ld + 8;  // another stride through the same buffer
  EXPECT_EQ(validate(cols).code(), kBad);
}

// T = 0: nothing to do, no pointer needed; the shape fields are still checked.
TEST(AttentionPrologue, ZeroTokensIsOk) {
  AttentionPrologueParams p;
  p.q_lora = 1536;
  p.qa_ld = 2240;
  p.latent_ld = 2240;
  p.k_raw_ld = 2240;
  EXPECT_TRUE(validate(p).ok()) << validate(p).to_string();
  EXPECT_TRUE(attention_prologue_ref(p).ok());
  p.qa_ld = 100;
  EXPECT_EQ(attention_prologue_ref(p).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsa::kernels
