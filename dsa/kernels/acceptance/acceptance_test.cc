// CPU tests of the acceptance op: its host checks, hand-made greedy cases, per-request param
// errors, and on fuzzed batches the invariants of its outputs (a in [0, d], emitted[0, a) equal
// the drafts, -1 after the emitted token, the emitted tokens equal sampling each row with the
// sampling op's reference). Its equality with the engine's host rule is an engine test
// (dsa/engine/device_acceptance_test.cc), since kernels/ cannot see the engine.
#include "dsa/kernels/acceptance/acceptance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "dsa/kernels/acceptance/acceptance_test_util.h"
#include "dsa/kernels/sampling/sampling.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using acceptance_test::AcceptBatch;
using acceptance_test::random_batch;

struct Outputs {
  std::vector<int32_t> accepted, emitted;
};

Outputs run_ref(const AcceptBatch& a, Status* status = nullptr) {
  Outputs o{std::vector<int32_t>(size_t(a.requests), -7),
            std::vector<int32_t>(size_t(a.requests) * size_t(a.rows_per_request()), -7)};
  const Status s = accept_drafts_ref(a.host_params(o.accepted.data(), o.emitted.data()));
  if (status) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  return o;
}

// One request, greedy, rows of V = 4 whose argmax is the given token.
AcceptBatch greedy_request(const std::vector<int32_t>& argmax, const std::vector<int32_t>& drafts) {
  AcceptBatch a;
  a.requests = 1;
  a.drafts_per_request = static_cast<int32_t>(drafts.size());
  a.vocab = 4;
  for (int32_t t : argmax) {
    for (int32_t v = 0; v < 4; ++v) a.logits.push_back(v == t ? 2.f : float(v) * 0.1f);
  }
  a.drafts = drafts;
  a.temperature = {0.f};
  a.top_p = {1.f};
  a.top_k = {0};
  a.seed = {0};
  a.first_position = {10};
  return a;
}

TEST(AcceptanceRef, GreedyHandCases) {
  Outputs o = run_ref(greedy_request({3, 1, 2, 0}, {3, 1, 2}));
  EXPECT_EQ(o.accepted, (std::vector<int32_t>{3}));
  EXPECT_EQ(o.emitted, (std::vector<int32_t>{3, 1, 2, 0}));  // all accepted, then the bonus
  o = run_ref(greedy_request({3, 1, 2, 0}, {3, 0, 2}));
  EXPECT_EQ(o.accepted, (std::vector<int32_t>{1}));
  EXPECT_EQ(o.emitted, (std::vector<int32_t>{3, 1, -1, -1}));  // g_1, then the correction
  o = run_ref(greedy_request({3, 1}, {7}));  // an out-of-vocabulary draft is simply rejected
  EXPECT_EQ(o.accepted, (std::vector<int32_t>{0}));
  EXPECT_EQ(o.emitted, (std::vector<int32_t>{3, -1}));
  o = run_ref(greedy_request({2}, {}));  // d = 0: plain decode
  EXPECT_EQ(o.accepted, (std::vector<int32_t>{0}));
  EXPECT_EQ(o.emitted, (std::vector<int32_t>{2}));
}

TEST(AcceptanceRef, NoEligibleTokenNeverAcceptsADraft) {
  AcceptBatch a = greedy_request({1, 2}, {-1});
  for (int v = 0; v < 4; ++v) a.logits[size_t(v)] = -std::numeric_limits<float>::infinity();
  const Outputs o = run_ref(a);
  EXPECT_EQ(o.accepted, (std::vector<int32_t>{0}));
  EXPECT_EQ(o.emitted, (std::vector<int32_t>{-1, -1}));
}

TEST(AcceptanceRef, ValidateNamesTheField) {
  AcceptBatch a = greedy_request({3, 1}, {3});
  std::vector<int32_t> acc(1), emit(2);
  EXPECT_TRUE(validate(a.host_params(acc.data(), emit.data())).ok());
  const auto expect_bad = [&](auto mutate, const char* field) {
    AcceptanceParams p = a.host_params(acc.data(), emit.data());
    mutate(p);
    const Status s = validate(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.to_string();
    EXPECT_EQ(accept_drafts_ref(p).code(), StatusCode::kInvalidArgument) << field;
  };
  expect_bad([](AcceptanceParams& p) { p.requests = -1; }, "requests = -1");
  expect_bad([](AcceptanceParams& p) { p.drafts_per_request = -2; }, "drafts_per_request = -2");
  expect_bad([](AcceptanceParams& p) { p.vocab = 0; }, "vocab = 0");
  expect_bad([](AcceptanceParams& p) { p.row_stride = 3; }, "row_stride = 3");
  expect_bad([](AcceptanceParams& p) { p.row_stride = -8; }, "row_stride = -8");
  expect_bad(
      [](AcceptanceParams& p) {
        p.requests = 1 << 20;
        p.drafts_per_request = 1 << 12;
      },
      "requests * (drafts_per_request + 1)");
  expect_bad([](AcceptanceParams& p) { p.logits = nullptr; }, "logits is null");
  expect_bad([](AcceptanceParams& p) { p.drafts = nullptr; }, "drafts is null");
  expect_bad([](AcceptanceParams& p) { p.temperature = nullptr; }, "temperature is null");
  expect_bad([](AcceptanceParams& p) { p.top_p = nullptr; }, "top_p is null");
  expect_bad([](AcceptanceParams& p) { p.top_k = nullptr; }, "top_k is null");
  expect_bad([](AcceptanceParams& p) { p.seed = nullptr; }, "seed is null");
  expect_bad([](AcceptanceParams& p) { p.first_position = nullptr; }, "first_position is null");
  expect_bad([](AcceptanceParams& p) { p.accepted = nullptr; }, "accepted is null");
  expect_bad([](AcceptanceParams& p) { p.emitted = nullptr; }, "emitted is null");
  AcceptanceParams empty = a.host_params(nullptr, nullptr);
  empty.requests = 0;
  EXPECT_TRUE(accept_drafts_ref(empty).ok());
}

TEST(AcceptanceRef, BadRequestParamsNameTheRequest) {
  testing::Rng rng(testing::test_seed());
  const auto expect_bad = [&](auto mutate, const std::string& what) {
    AcceptBatch a = random_batch(rng, 3, 2, 16, 0);
    for (auto& f : a.first_position) f = 5;
    mutate(a);
    Status s;
    const Outputs o = run_ref(a, &s);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find("request 1: " + what), std::string::npos) << s.to_string();
    EXPECT_GE(o.accepted[0], 0) << "request 0 is written before the error";
  };
  expect_bad([](AcceptBatch& a) { a.temperature[1] = -1.f; }, "temperature = -1");
  expect_bad([](AcceptBatch& a) { a.top_p[1] = 0.f; }, "top_p = 0");
  expect_bad([](AcceptBatch& a) { a.top_k[1] = -3; }, "top_k = -3");
  expect_bad([](AcceptBatch& a) { a.first_position[1] = -1; }, "first_position = -1");
  expect_bad([](AcceptBatch& a) { a.first_position[1] = std::numeric_limits<int32_t>::max() - 1; },
             "first_position = 2147483646");
}

// `greedy` (the MTP chain's drafts): each request's one row gives its argmax whatever its params
// say (they are sampled ones here, and then null), ties to the lowest id, NaN / -inf never
// chosen, kNoToken for a row with no eligible token; a = 0.
TEST(AcceptanceRef, GreedyFlagTakesEachRowsArgmax) {
  testing::Rng rng(testing::test_seed() + 5);
  int no_token = 0;  // rows with no eligible entry, over every case
  for (const int32_t V : {1, 7, 61, 6144}) {
    const AcceptBatch a = random_batch(rng, 33, 0, V, 3);
    for (const bool with_params : {true, false}) {
      Outputs o{std::vector<int32_t>(33, -7), std::vector<int32_t>(33, -7)};
      AcceptanceParams p = a.host_params(o.accepted.data(), o.emitted.data());
      p.greedy = true;
      if (!with_params) {
        p.temperature = p.top_p = nullptr;
        p.top_k = p.first_position = nullptr;
        p.seed = nullptr;
      }
      const Status st = accept_drafts_ref(p);
      ASSERT_TRUE(st.ok()) << st.to_string();
      int sampled = 0;
      for (int32_t b = 0; b < 33; ++b) {
        const std::span<const float> row = a.rows(b);
        int32_t want = kNoToken;  // the first maximum among the eligible entries
        for (int32_t v = 0; v < V; ++v) {
          const float x = row[size_t(v)];
          if (std::isnan(x) || x == -std::numeric_limits<float>::infinity()) continue;
          if (want == kNoToken || x > row[size_t(want)]) want = v;
        }
        EXPECT_EQ(o.emitted[size_t(b)], want) << "V " << V << " request " << b;
        EXPECT_EQ(o.accepted[size_t(b)], 0);
        sampled += a.temperature[size_t(b)] > 0.f;
        no_token += want == kNoToken;
      }
      if (V == 6144) EXPECT_GT(sampled, 0) << "no request with sampled params to ignore";
    }
  }
  EXPECT_GT(no_token, 0) << "no row without an eligible token among the edge rows";
}

// The greedy form of a call: its sampling params and first positions null (not read), its shift
// set to values out of range (ignored).
AcceptanceParams greedy_form(AcceptanceParams p, const std::vector<int32_t>& bad_shift) {
  p.greedy = true;
  p.temperature = p.top_p = nullptr;
  p.top_k = p.first_position = nullptr;
  p.seed = nullptr;
  p.shift_accepted = bad_shift.data();
  return p;
}

// `greedy` at d >= 1 (the verify when every request is greedy): the same accepted counts and
// emitted tokens as the sampled form at temperature 0, on fuzzed rows with every edge case (ties,
// NaN / -inf, rows without an eligible token), drafts gathered, kept in random slots and kept at
// the index's ends (entries 0 and bound - 1).
TEST(AcceptanceRef, GreedyVerifyEqualsTemperatureZero) {
  testing::Rng rng(testing::test_seed() + 13);
  int hist[10] = {}, every_draft = 0, no_token = 0;
  for (const int32_t V : {1, 2, 7, 61, 1000}) {
    for (const int32_t d : {1, 2, 3, 7, 9}) {
      const AcceptBatch a = acceptance_test::greedy_batch(random_batch(rng, 24, d, V, 3), rng);
      const Outputs want = run_ref(a);  // the sampled form, every temperature 0
      const std::vector<int32_t> bad_shift(size_t(a.requests), d + 5);
      const std::string what = "V " + std::to_string(V) + " d " + std::to_string(d);
      const acceptance_test::KeptForm kept[] = {acceptance_test::kept_form(a, rng),
                                                acceptance_test::kept_at_the_edges(a)};
      for (int form = 0; form < 3; ++form) {  // gathered, kept at random, kept at the edges
        Outputs got{std::vector<int32_t>(want.accepted.size(), -7),
                    std::vector<int32_t>(want.emitted.size(), -7)};
        AcceptanceParams p = a.host_params(got.accepted.data(), got.emitted.data());
        if (form > 0) {
          const acceptance_test::KeptForm& k = kept[form - 1];
          p = k.with(p, k.drafts.data(), k.slots.data(), k.index.data(), k.first_position.data(),
                     k.shift.data());
        }
        p = greedy_form(p, bad_shift);
        ASSERT_TRUE(validate(p).ok()) << what;
        const Status st = accept_drafts_ref(p);
        ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
        EXPECT_EQ(got.accepted, want.accepted) << what << " form " << form;
        EXPECT_EQ(got.emitted, want.emitted) << what << " form " << form;
      }
      for (const int32_t acc : want.accepted) ++hist[acc], every_draft += acc == d;
      for (const int32_t y : want.emitted) no_token += y == kNoToken;
    }
  }
  for (int a = 0; a < 10; ++a) std::printf("greedy accepted %d: %d requests\n", a, hist[a]);
  for (int a = 0; a < 4; ++a) EXPECT_GT(hist[a], 0) << "the fuzzer should reach a = " << a;
  EXPECT_GT(every_draft, 0) << "no request accepting every draft";
  EXPECT_GT(no_token, 0);
}

// A greedy verify still checks its draft index (the one input it reads besides the rows and the
// drafts): a bad entry names the request and the entry, with the params null.
TEST(AcceptanceRef, GreedyVerifyChecksTheDraftIndex) {
  testing::Rng rng(testing::test_seed() + 14);
  const AcceptBatch a = acceptance_test::greedy_batch(random_batch(rng, 3, 3, 16, 0), rng);
  const acceptance_test::KeptForm k = acceptance_test::kept_at_the_edges(a);
  std::vector<int32_t> acc(3), emit(12), index = k.index;
  const std::vector<int32_t> bad_shift(3, -1);
  const AcceptanceParams p =
      greedy_form(k.with(a.host_params(acc.data(), emit.data()), k.drafts.data(), k.slots.data(),
                         index.data(), nullptr, nullptr),
                  bad_shift);
  ASSERT_TRUE(accept_drafts_ref(p).ok());
  for (const int32_t bad : {k.bound, -2}) {
    index[4] = bad;  // request 1, draft 2
    const Status st = accept_drafts_ref(p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("request 1: draft_index[4] = " + std::to_string(bad)),
              std::string::npos)
        << st.to_string();
  }
  AcceptanceParams q = p;
  q.drafts = nullptr;
  EXPECT_NE(accept_drafts_ref(q).message().find("drafts is null"), std::string::npos);
}

// A wider row stride reads only the first V columns: the same outputs as the compact rows, though
// the extra columns would win every row if read (a padded LM head's width).
TEST(AcceptanceRef, RowStrideReadsOnlyTheVocabulary) {
  testing::Rng rng(testing::test_seed() + 2);
  for (int32_t d : {0, 3}) {
    const AcceptBatch a = random_batch(rng, 9, d, 61);
    const Outputs compact = run_ref(a);
    const std::vector<float> wide = acceptance_test::strided_logits(a, 67, 1e30f);
    Outputs o{std::vector<int32_t>(compact.accepted.size(), -7),
              std::vector<int32_t>(compact.emitted.size(), -7)};
    AcceptanceParams p = a.host_params(o.accepted.data(), o.emitted.data());
    p.logits = wide.data();
    p.row_stride = 67;
    ASSERT_TRUE(accept_drafts_ref(p).ok());
    EXPECT_EQ(o.accepted, compact.accepted) << "d " << d;
    EXPECT_EQ(o.emitted, compact.emitted) << "d " << d;
  }
}

// Fuzzed batches: the outputs' invariants, and the emitted tokens equal the sampling op's
// reference on the same rows and positions.
TEST(AcceptanceRef, FuzzedBatchesAgreeWithTheSampler) {
  testing::Rng rng(testing::test_seed() + 1);
  int hist[8] = {};
  for (int32_t V : {1, 2, 7, 64, 1000}) {
    for (int32_t d : {0, 1, 3, 7}) {
      const AcceptBatch a = random_batch(rng, 12, d, V);
      const Outputs o = run_ref(a);
      const int32_t n = d + 1;
      // Every row sampled by the sampling op, rows b n + j at first_position[b] + j.
      const int32_t R = a.requests * n;
      std::vector<float> t, p;
      std::vector<int32_t> k, pos, y(size_t(R), -7);
      std::vector<uint64_t> s;
      for (int32_t b = 0; b < a.requests; ++b) {
        for (int32_t j = 0; j < n; ++j) {
          t.push_back(a.temperature[size_t(b)]);
          p.push_back(a.top_p[size_t(b)]);
          k.push_back(a.top_k[size_t(b)]);
          s.push_back(a.seed[size_t(b)]);
          pos.push_back(a.first_position[size_t(b)] + j);
        }
      }
      SamplingOpParams sp{a.logits.data(), R,        V,          t.data(), p.data(),
                          k.data(),        s.data(), pos.data(), y.data()};
      ASSERT_TRUE(sample_rows_ref(sp).ok());
      for (int32_t b = 0; b < a.requests; ++b) {
        const int32_t acc = o.accepted[size_t(b)];
        ASSERT_GE(acc, 0);
        ASSERT_LE(acc, d);
        ++hist[acc];
        const auto g = a.drafts_of(b);
        for (int32_t j = 0; j < n; ++j) {
          const int32_t e = o.emitted[size_t(b * n + j)];
          if (j < acc) EXPECT_EQ(e, g[size_t(j)]) << "V " << V << " d " << d << " b " << b;
          if (j <= acc) EXPECT_EQ(e, y[size_t(b * n + j)]) << "V " << V << " d " << d;
          if (j > acc) EXPECT_EQ(e, -1) << "V " << V << " d " << d << " b " << b;
        }
        if (acc < d) {  // the mismatch: no token, or not the draft
          const int32_t e = o.emitted[size_t(b * n + acc)];
          EXPECT_TRUE(e == -1 || e != g[size_t(acc)]);
        }
      }
    }
  }
  for (int a = 0; a < 8; ++a) std::printf("accepted %d: %d requests\n", a, hist[a]);
  for (int a = 0; a < 4; ++a) EXPECT_GT(hist[a], 0) << "the fuzzer should reach a = " << a;
}

// The engine's overlapped form (drafts kept in their slots, positions not yet shifted) gives the
// batch's own answer: every kept draft's `drafts` entry is a wrong token, so reading it there
// instead of in its slot changes the answer, and so does a first position without its shift.
TEST(AcceptanceRef, KeptDraftsAndShiftGiveTheGatheredAnswer) {
  testing::Rng rng(testing::test_seed() + 11);
  for (int32_t d : {1, 3, 7, 9}) {
    for (int rep = 0; rep < 4; ++rep) {
      const AcceptBatch a = random_batch(rng, 24, d, 37);
      const Outputs want = run_ref(a);
      const acceptance_test::KeptForm k = acceptance_test::kept_form(a, rng);
      Outputs got{std::vector<int32_t>(size_t(a.requests), -7),
                  std::vector<int32_t>(want.emitted.size(), -7)};
      const AcceptanceParams q =
          k.with(a.host_params(got.accepted.data(), got.emitted.data()), k.drafts.data(),
                 k.slots.data(), k.index.data(), k.first_position.data(), k.shift.data());
      ASSERT_TRUE(accept_drafts_ref(q).ok());
      EXPECT_EQ(got.accepted, want.accepted) << "d " << d;
      EXPECT_EQ(got.emitted, want.emitted) << "d " << d;
    }
  }
}

TEST(AcceptanceRef, BadKeptDraftsAndShiftNameTheField) {
  testing::Rng rng(testing::test_seed() + 12);
  const AcceptBatch a = random_batch(rng, 3, 3, 16, 0);
  const acceptance_test::KeptForm k = acceptance_test::kept_form(a, rng);
  std::vector<int32_t> acc(3), emit(12);
  const AcceptanceParams good =
      k.with(a.host_params(acc.data(), emit.data()), k.drafts.data(), k.slots.data(),
             k.index.data(), k.first_position.data(), k.shift.data());
  ASSERT_TRUE(accept_drafts_ref(good).ok());
  const auto message = [](const AcceptanceParams& q) {
    const Status s = accept_drafts_ref(q);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  AcceptanceParams q = good;
  q.draft_slots = nullptr;
  EXPECT_NE(message(q).find("draft_slots and draft_index"), std::string::npos);
  q = good;
  q.draft_index_bound = 0;
  EXPECT_NE(message(q).find("draft_index_bound = 0"), std::string::npos);
  std::vector<int32_t> index = k.index;
  index[4] = k.bound;  // request 1, draft 2
  q = good;
  q.draft_index = index.data();
  EXPECT_NE(message(q).find("request 1: draft_index[4] = " + std::to_string(k.bound)),
            std::string::npos);
  index[4] = -2;
  EXPECT_NE(message(q).find("draft_index[4] = -2"), std::string::npos);
  std::vector<int32_t> shift = k.shift;
  shift[2] = 4;  // > d
  q = good;
  q.shift_accepted = shift.data();
  EXPECT_NE(message(q).find("request 2: shift_accepted = 4: must be in [0, 3]"), std::string::npos);
  shift[2] = -1;
  EXPECT_NE(message(q).find("shift_accepted = -1"), std::string::npos);
  // A first position that is fine alone but leaves int32 once shifted.
  std::vector<int32_t> first = k.first_position;
  first[0] = std::numeric_limits<int32_t>::max() - 3;
  shift = k.shift;
  shift[0] = 1;
  q = good;
  q.first_position = first.data();
  q.shift_accepted = shift.data();
  EXPECT_NE(message(q).find("request 0: first_position + shift_accepted = 2147483645"),
            std::string::npos);
}

}  // namespace
}  // namespace dsa::kernels
