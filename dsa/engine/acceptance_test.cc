// accept_drafts (SPEC.md §6.2, §6.3): greedy acceptance on hand-made rows, and the lossless
// property at temperature 0 and > 0: speculative steps with arbitrary drafts (some right, some
// wrong) emit exactly the tokens of non-speculative decoding with the same seed, for d = 1..4.
#include "dsa/engine/acceptance.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "dsa/kernels/sampling/sampler_test_util.h"

namespace dsa::engine {
namespace {

using namespace kernels::sampler_test;
using kernels::sample_token;

// Rows of 4 logits whose argmax is the given token.
std::vector<float> greedy_rows(const std::vector<int32_t>& argmax) {
  std::vector<float> rows;
  for (int32_t t : argmax) {
    for (int32_t v = 0; v < 4; ++v) rows.push_back(v == t ? 2.f : float(v) * 0.1f);
  }
  return rows;
}

TEST(AcceptDrafts, GreedyAllAcceptedEmitsTheBonus) {
  const std::vector<int32_t> drafts = {3, 1, 2};
  const AcceptResult r = accept_drafts(greedy_rows({3, 1, 2, 0}), 4, drafts, {}, 10);
  EXPECT_EQ(r.accepted, 3);
  EXPECT_EQ(r.emitted, (std::vector<int32_t>{3, 1, 2, 0}));
}

TEST(AcceptDrafts, GreedyStopsAtTheFirstMismatch) {
  const std::vector<int32_t> drafts = {3, 0, 2};
  const AcceptResult r = accept_drafts(greedy_rows({3, 1, 2, 0}), 4, drafts, {}, 10);
  EXPECT_EQ(r.accepted, 1);
  EXPECT_EQ(r.emitted, (std::vector<int32_t>{3, 1}));  // g_1, then the correction y_{C+2} = 1
}

TEST(AcceptDrafts, GreedyFirstDraftRejected) {
  const std::vector<int32_t> drafts = {0, 1};
  const AcceptResult r = accept_drafts(greedy_rows({3, 1, 2}), 4, drafts, {}, 0);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.emitted, (std::vector<int32_t>{3}));
}

TEST(AcceptDrafts, NoDraftsIsPlainDecode) {
  const AcceptResult r = accept_drafts(greedy_rows({2}), 4, {}, {}, 5);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.emitted, (std::vector<int32_t>{2}));
}

// Ties in a verify row resolve to the lowest id, as in non-speculative greedy decoding.
TEST(AcceptDrafts, GreedyTiesGoToTheLowestId) {
  const std::vector<float> rows = {1, 5, 5, 0, /**/ 0, 0, 0, 0};
  const std::vector<int32_t> wrong = {2}, right = {1};
  EXPECT_EQ(accept_drafts(rows, 4, wrong, {}, 0).emitted, (std::vector<int32_t>{1}));
  EXPECT_EQ(accept_drafts(rows, 4, right, {}, 0).emitted, (std::vector<int32_t>{1, 0}));
}

TEST(AcceptDrafts, OutOfVocabularyDraftsAreRejected) {
  for (int32_t g : {-1, 4, std::numeric_limits<int32_t>::max()}) {
    const std::vector<int32_t> drafts = {g};
    const AcceptResult r = accept_drafts(greedy_rows({3, 1}), 4, drafts, {}, 0);
    EXPECT_EQ(r.accepted, 0) << g;
    EXPECT_EQ(r.emitted, (std::vector<int32_t>{3})) << g;
  }
}

// A row without an eligible token yields kNoToken, which accepts nothing (not even a -1 draft).
TEST(AcceptDrafts, RowWithoutEligibleTokenStops) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> rows = {nan, nan, nan, nan, /**/ 0, 1, 0, 0};
  const std::vector<int32_t> drafts = {kNoToken};
  const AcceptResult r = accept_drafts(rows, 4, drafts, {}, 0);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.emitted, (std::vector<int32_t>{kNoToken}));
}

// Row j is sampled at position first_position + j: the sampled rows agree with sample_token there.
TEST(AcceptDrafts, RowJIsSampledAtFirstPositionPlusJ) {
  std::vector<float> rows(4 * 64);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = hash_unit(i);
  const SamplingParams p{.temperature = 1.f, .seed = 99};
  for (int64_t c1 = 0; c1 < 200; ++c1) {
    // Draft each row's own sample, so every row is reached.
    std::vector<int32_t> drafts;
    for (int64_t j = 0; j < 3; ++j) {
      drafts.push_back(
          sample_token(std::span<const float>(rows).subspan(size_t(j) * 64, 64), p, c1 + j));
    }
    const AcceptResult r = accept_drafts(rows, 64, drafts, p, c1);
    ASSERT_EQ(r.accepted, 3);
    EXPECT_EQ(r.emitted[3],
              sample_token(std::span<const float>(rows).subspan(3 * 64, 64), p, c1 + 3));
  }
}

// ---- losslessness: speculative == non-speculative ---------------------------------------------

constexpr int32_t kVocab = 48;

// A deterministic 'model': logits for the next token are a hash-seeded random vector of the prefix.
// Scaled so that distributions are neither one-hot nor flat.
std::vector<float> model_logits(const std::vector<int32_t>& prefix) {
  uint64_t h = 0xC0FFEE;
  for (int32_t t : prefix) h = mix64(h ^ uint64_t(uint32_t(t)));
  std::vector<float> l(kVocab);
  for (int32_t v = 0; v < kVocab; ++v) l[size_t(v)] = 3.f * hash_unit(h + uint64_t(v));
  return l;
}

// Non-speculative decoding: token at position len(seq) sampled from model(seq).
std::vector<int32_t> decode_plain(std::vector<int32_t> seq, size_t total, const SamplingParams& p) {
  while (seq.size() < total) {
    seq.push_back(sample_token(model_logits(seq), p, static_cast<int64_t>(seq.size())));
  }
  return seq;
}

struct SpecStats {
  int64_t steps = 0, accepted = 0, drafted = 0;
};

// Speculative decoding with d drafts per step. seq holds the committed tokens and the pending one
// x_C (so C = seq.size() - 1); the drafter proposes, per draft, the true continuation or a random
// token (which may also be right), chosen by a hash.
std::vector<int32_t> decode_speculative(std::vector<int32_t> seq, size_t total, int d,
                                        const SamplingParams& p,
                                        const std::vector<int32_t>& reference, SpecStats& stats) {
  uint64_t drafter = 0xD4AF7 + uint64_t(d);
  while (seq.size() < total) {
    const size_t c1 = seq.size();  // C + 1: the position row 0 predicts
    std::vector<int32_t> drafts;
    for (int j = 0; j < d; ++j) {
      drafter = mix64(drafter);
      const size_t pos = c1 + size_t(j);
      const bool right = (drafter & 3) != 0 && pos < reference.size();
      drafts.push_back(right ? reference[pos] : int32_t((drafter >> 8) % kVocab));
    }
    // TARGET_VERIFY: row j sees seq + g_1..g_j.
    std::vector<float> verify;
    std::vector<int32_t> prefix = seq;
    for (int j = 0; j <= d; ++j) {
      const std::vector<float> row = model_logits(prefix);
      verify.insert(verify.end(), row.begin(), row.end());
      if (j < d) prefix.push_back(drafts[size_t(j)]);
    }
    const AcceptResult r = accept_drafts(verify, kVocab, drafts, p, static_cast<int64_t>(c1));
    EXPECT_EQ(r.emitted.size(), size_t(r.accepted) + 1);
    for (int32_t j = 0; j < r.accepted; ++j) EXPECT_EQ(r.emitted[size_t(j)], drafts[size_t(j)]);
    seq.insert(seq.end(), r.emitted.begin(), r.emitted.end());
    ++stats.steps;
    stats.accepted += r.accepted;
    stats.drafted += d;
  }
  seq.resize(total);  // the last step may overshoot
  return seq;
}

void expect_lossless(const SamplingParams& p) {
  const std::vector<int32_t> prompt = {5, 17, 2};
  const size_t total = 160;
  for (uint64_t seed : {1ull, 0xABCDEF12345ull, 0xFFFFFFFFFFFFFFFFull}) {
    SamplingParams ps = p;
    ps.seed = seed;
    const std::vector<int32_t> plain = decode_plain(prompt, total, ps);
    for (int d = 1; d <= 4; ++d) {
      SpecStats stats;
      const std::vector<int32_t> spec = decode_speculative(prompt, total, d, ps, plain, stats);
      EXPECT_EQ(spec, plain) << "d = " << d << " seed = " << seed << " T = " << p.temperature;
      // Both outcomes were exercised: some drafts accepted, some rejected.
      EXPECT_GT(stats.accepted, 0) << "d = " << d;
      EXPECT_LT(stats.accepted, stats.drafted) << "d = " << d;
    }
  }
}

TEST(AcceptDraftsLossless, Greedy) { expect_lossless({}); }
TEST(AcceptDraftsLossless, Sampled) { expect_lossless({.temperature = 1.f}); }
TEST(AcceptDraftsLossless, SampledWithTopKAndTopP) {
  expect_lossless({.temperature = 0.7f, .top_p = 0.9f, .top_k = 12});
}
TEST(AcceptDraftsLossless, SampledHotWithTopK) {
  expect_lossless({.temperature = 1.8f, .top_k = 30});
}

// Non-speculative sampling is itself batch- and chunk-free: the same positions with the same seed
// give the same tokens whether the rows come one at a time or in one verify call.
TEST(AcceptDraftsLossless, AcceptedRowsEqualStandaloneSamples) {
  const SamplingParams p{.temperature = 1.f, .top_k = 20, .seed = 5};
  std::vector<int32_t> seq = {1, 2, 3};
  const std::vector<int32_t> plain = decode_plain(seq, 40, p);
  const std::vector<int32_t> drafts(plain.begin() + 3, plain.begin() + 7);  // the oracle drafter
  std::vector<float> verify;
  std::vector<int32_t> prefix = seq;
  for (int j = 0; j <= 4; ++j) {
    const std::vector<float> row = model_logits(prefix);
    verify.insert(verify.end(), row.begin(), row.end());
    if (j < 4) prefix.push_back(drafts[size_t(j)]);
  }
  const AcceptResult r = accept_drafts(verify, kVocab, drafts, p, 3);
  EXPECT_EQ(r.accepted, 4);  // accept length n = d + 1
  EXPECT_EQ(r.emitted, std::vector<int32_t>(plain.begin() + 3, plain.begin() + 8));
}

}  // namespace
}  // namespace dsa::engine
