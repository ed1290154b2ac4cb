// GPU tests of accept_drafts_cuda against accept_drafts_ref (SPEC.md §6.2, §6.3) on fuzzed
// batches: V = 1, 7, 37, 6144, 129280; d = 0, 1, 3, 7, 8, 12 (both count paths); greedy and sampled
// requests with top-k / top-p, and the `greedy` form (the argmax kernel) at every d; drafts that
// follow the target for a random number of positions; edge rows (ties, NaN, -inf, +inf, no
// eligible token); positions up to 2^31 - 1; a row stride wider than V. Accepted counts and
// emitted tokens equal the reference, except where a request's first differing row is a near-tie
// of the host's perturbed scores (top-two gap below 1e-5, the GPU token the host's runner-up:
// device and host fp64 log / exp may differ in the last bit); every such case is printed and
// counted. Also the engine's overlapped form (drafts kept in their slots, positions shifted by the
// op), bad request params, shifts and draft indices (checked error word, unchecked a = 0 and -1),
// B = 0, and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/kernels/acceptance/acceptance_test_util.h"
#include "dsa/kernels/sampling/sampler.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/scoped_env.h"

namespace dsa::kernels {
namespace {

using acceptance_test::AcceptBatch;
using acceptance_test::random_batch;
using testing::dev;
using testing::or_die;
using testing::Rng;

constexpr double kNearTie = 1e-5;

struct Outputs {
  std::vector<int32_t> accepted, emitted;
  bool operator==(const Outputs&) const = default;
};

Outputs run_ref(const AcceptBatch& a) {
  Outputs o{std::vector<int32_t>(size_t(a.requests), -7),
            std::vector<int32_t>(size_t(a.requests) * size_t(a.rows_per_request()), -7)};
  const Status s = accept_drafts_ref(a.host_params(o.accepted.data(), o.emitted.data()));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return o;
}

// How run_cuda sets `greedy`: not at all; with the sampling params and first positions null (the
// argmax kernel); or with them set (DSA_ACCEPT_GREEDY=generic then runs the sampling kernel).
enum class Greedy { kOff, kNullParams, kWithParams };

// Runs the CUDA op with poisoned outputs; the status through `status` if given; with `kept`, over
// the batch's kept-draft, unshifted form (acceptance_test_util.h).
Outputs run_cuda(const AcceptBatch& a, Status* status = nullptr, int64_t row_stride = 0,
                 const acceptance_test::KeptForm* kept = nullptr, Greedy greedy = Greedy::kOff) {
  // A wider stride: the extra columns hold a value that would win every row if read.
  auto l = dev(row_stride ? acceptance_test::strided_logits(a, row_stride, 1e30f) : a.logits);
  auto g = dev(a.drafts, 1);  // d = 0: no drafts, but a non-null pointer
  auto t = dev(a.temperature);
  auto p = dev(a.top_p);
  auto k = dev(a.top_k);
  auto s = dev(a.seed);
  auto first = dev(a.first_position);
  auto acc = testing::poisoned<int32_t>(size_t(std::max(a.requests, 1)), 0x5A);
  auto emit =
      testing::poisoned<int32_t>(size_t(std::max(a.requests, 1)) * a.rows_per_request(), 0x5A);
  AcceptanceParams q = a.params(l.data(), g.data(), t.data(), p.data(), k.data(), s.data(),
                                first.data(), acc.data(), emit.data());
  q.row_stride = row_stride;
  auto kg = dev(kept ? kept->drafts : std::vector<int32_t>{}, 1);
  auto ks = dev(kept ? kept->slots : std::vector<int32_t>{}, 1);
  auto ki = dev(kept ? kept->index : std::vector<int32_t>{}, 1);
  auto kf = dev(kept ? kept->first_position : std::vector<int32_t>{}, 1);
  auto kh = dev(kept ? kept->shift : std::vector<int32_t>{}, 1);
  if (kept) q = kept->with(q, kg.data(), ks.data(), ki.data(), kf.data(), kh.data());
  q.greedy = greedy != Greedy::kOff;
  if (greedy == Greedy::kNullParams) {
    q.temperature = q.top_p = nullptr;
    q.top_k = q.first_position = nullptr;
    q.seed = nullptr;
  }
  const Status st = accept_drafts_cuda(q);
  if (status) {
    *status = st;
  } else {
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Outputs o{or_die(acc.download()), or_die(emit.download())};
  o.accepted.resize(size_t(a.requests));
  o.emitted.resize(size_t(a.requests) * size_t(a.rows_per_request()));
  return o;
}

// The host's two best perturbed scores over the kept tokens of one row and their gap.
struct TopTwo {
  int32_t first = -1, second = -1;
  double gap = std::numeric_limits<double>::infinity();
};
TopTwo host_top_two(std::span<const float> row, const SamplingParams& sp, int32_t position) {
  const std::vector<double> pi = sampling_distribution(row, sp);
  const bool pos_inf =
      std::any_of(row.begin(), row.end(), [](float x) { return std::isinf(x) && x > 0; });
  double s1 = -std::numeric_limits<double>::infinity(), s2 = s1;
  TopTwo t;
  for (size_t v = 0; v < row.size(); ++v) {
    if (!(pi[v] > 0)) continue;
    const double scaled = pos_inf ? 0.0 : double(row[v]) / double(sp.temperature);
    const double s = scaled + double(gumbel_noise(sp.seed, position, int32_t(v)));
    if (s > s1) {
      s2 = s1, t.second = t.first;
      s1 = s, t.first = int32_t(v);
    } else if (s > s2) {
      s2 = s, t.second = int32_t(v);
    }
  }
  t.gap = s1 - s2;
  return t;
}

// Compares per request; returns the number of accepted near-tie mismatches.
int compare(const AcceptBatch& a, const Outputs& gpu, const Outputs& ref, const std::string& what) {
  const int32_t n = a.rows_per_request();
  int near_ties = 0;
  for (int32_t b = 0; b < a.requests; ++b) {
    const auto at = [n, b](const Outputs& o, int32_t j) { return o.emitted[size_t(b * n + j)]; };
    int32_t j = 0;
    while (j < n && at(gpu, j) == at(ref, j)) ++j;
    if (j == n && gpu.accepted[size_t(b)] == ref.accepted[size_t(b)]) continue;
    const SamplingParams sp = a.sampling(b);
    bool ok = false;
    double gap = 0;
    if (j < n && sp.temperature > 0.f) {  // greedy rows must agree exactly
      const auto row = a.rows(b).subspan(size_t(j) * size_t(a.vocab), size_t(a.vocab));
      const TopTwo t = host_top_two(row, sp, a.first_position[size_t(b)] + j);
      gap = t.gap;
      ok = t.gap < kNearTie && at(ref, j) == t.first && at(gpu, j) == t.second;
    }
    std::printf(
        "%s request %d: row %d gpu %d ref %d, accepted gpu %d ref %d (T %g k %d p %g) "
        "top-two gap %.3e -> %s\n",
        what.c_str(), b, j, j < n ? at(gpu, j) : -9, j < n ? at(ref, j) : -9,
        gpu.accepted[size_t(b)], ref.accepted[size_t(b)], sp.temperature, sp.top_k, sp.top_p, gap,
        ok ? "near-tie, accepted" : "FAIL");
    EXPECT_TRUE(ok) << what << " request " << b;
    near_ties += ok;
  }
  std::printf("%s: %d requests, d %d, V %d, %d near-tie mismatches\n", what.c_str(), a.requests,
              a.drafts_per_request, a.vocab, near_ties);
  return near_ties;
}

void check(const AcceptBatch& a, const std::string& what) {
  const Outputs ref = run_ref(a);
  const Outputs gpu = run_cuda(a);
  EXPECT_LE(compare(a, gpu, ref, what), std::max(1, a.requests / 50)) << what;
}

TEST(AcceptanceCuda, FuzzedBatchesMatchTheReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  // d 1..7: counted inside the sampling launch (a cluster per request); 8, 12: the count launch.
  for (int32_t V : {1, 7, 37, 6144, 129280}) {
    for (int32_t d : {0, 1, 2, 3, 5, 7, 8, 12}) {
      const int32_t B = V > 10000 ? 6 : 40;
      check(random_batch(rng, B, d, V), "V " + std::to_string(V) + " d " + std::to_string(d));
    }
  }
}

// DSA_ACCEPT_CLUSTER=off: the count launch at every d, the kept and shifted form included.
TEST(AcceptanceCuda, CountLaunchAtEveryDraftCount) {
  DSA_SKIP_WITHOUT_GPU();
  const testing::ScopedEnv form("DSA_ACCEPT_CLUSTER", "off");
  Rng rng(testing::test_seed() + 6);
  for (int32_t d : {1, 3, 7}) {
    const AcceptBatch a = random_batch(rng, 40, d, 6144);
    const std::string what = "count launch d " + std::to_string(d);
    check(a, what);
    const acceptance_test::KeptForm k = acceptance_test::kept_form(a, rng);
    EXPECT_LE(compare(a, run_cuda(a, nullptr, 0, &k), run_ref(a), what + " kept"), 1) << what;
  }
  const testing::ScopedEnv bad("DSA_ACCEPT_CLUSTER", "maybe");
  Status st;
  run_cuda(random_batch(rng, 2, 3, 64), &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.to_string().find("DSA_ACCEPT_CLUSTER"), std::string::npos) << st.to_string();
}

// `greedy` (the MTP chain's drafts): the argmax kernel, params null or sampled ones it must not
// read, against the reference bit for bit (an argmax has no near-ties to allow) at V = 1 .. V3.2's
// 129280, edge rows every third row (ties, NaN / -inf, no eligible token), a wider row stride;
// and DSA_ACCEPT_GREEDY=generic, the sampling kernel on the same calls with their params at
// temperature 0, the same tokens; a bad value of the switch refused naming it.
TEST(AcceptanceCuda, GreedyKernelEqualsTheReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 8);
  const auto run = [](const AcceptBatch& a, bool with_params, int64_t stride, Status* st) {
    auto l = dev(stride ? acceptance_test::strided_logits(a, stride, 1e30f) : a.logits);
    auto t = dev(a.temperature), p = dev(a.top_p);
    auto k = dev(a.top_k), first = dev(a.first_position);
    auto sd = dev(a.seed);
    auto acc = testing::poisoned<int32_t>(size_t(a.requests), 0x5A);
    auto emit = testing::poisoned<int32_t>(size_t(a.requests), 0x5A);
    AcceptanceParams q = a.params(l.data(), nullptr, t.data(), p.data(), k.data(), sd.data(),
                                  first.data(), acc.data(), emit.data());
    q.row_stride = stride;
    q.greedy = true;
    if (!with_params) {
      q.temperature = q.top_p = nullptr;
      q.top_k = q.first_position = nullptr;
      q.seed = nullptr;
    }
    *st = accept_drafts_cuda(q);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Outputs{or_die(acc.download()), or_die(emit.download())};
  };
  for (const int32_t V : {1, 7, 37, 6144, 129280}) {
    for (const int64_t stride : {int64_t{0}, int64_t{V} + 9}) {
      AcceptBatch a = random_batch(rng, V > 10000 ? 9 : 33, 0, V, 3);
      const Outputs ref = run_ref(a);  // at the batch's own params: sampled rows differ
      Outputs want{std::vector<int32_t>(size_t(a.requests)), {}};
      {
        AcceptanceParams q = a.host_params(want.accepted.data(), nullptr);
        want.emitted.resize(size_t(a.requests));
        q.emitted = want.emitted.data();
        q.greedy = true;
        const Status st = accept_drafts_ref(q);
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
      const std::string what = "V " + std::to_string(V) + " stride " + std::to_string(stride);
      if (V >= 37) {
        EXPECT_NE(want.emitted, ref.emitted) << what << ": no sampled request to ignore";
      }
      for (const bool with_params : {false, true}) {
        Status st;
        const Outputs got = run(a, with_params, stride, &st);
        EXPECT_TRUE(st.ok()) << what << ": " << st.to_string();
        EXPECT_EQ(got, want) << what << (with_params ? " (params set)" : " (params null)");
      }
      // The generic form reads the params: at temperature 0 it must give the same tokens.
      std::fill(a.temperature.begin(), a.temperature.end(), 0.f);
      const testing::ScopedEnv generic("DSA_ACCEPT_GREEDY", "generic");
      Status st;
      EXPECT_EQ(run(a, true, stride, &st), want) << what << " generic";
      EXPECT_TRUE(st.ok()) << what << " generic: " << st.to_string();
    }
  }
  const testing::ScopedEnv bad("DSA_ACCEPT_GREEDY", "fast");
  Status st;
  run(random_batch(rng, 2, 0, 64), false, 0, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.to_string().find("DSA_ACCEPT_GREEDY"), std::string::npos) << st.to_string();
}

// `greedy` at d >= 1 (the verify when every request is greedy): the argmax kernel, the d + 1 CTAs
// of a request one cluster up to d = 7 and the count launch above it (and at d = 1, 3 under
// DSA_ACCEPT_CLUSTER=off), params and first positions null and a shift out of range (none read),
// against the reference's sampled form at temperature 0 bit for bit (an argmax has no near-ties):
// V = 1 .. V3.2's 129280, edge rows every third row (ties, NaN / -inf, no eligible token), the
// drafts gathered (also under a wider row stride), kept in random slots and kept at the index's
// ends (entries 0 and bound - 1). DSA_ACCEPT_GREEDY=generic, the sampling kernel on the same calls
// with their params (temperature 0) and a valid shift, gives the same.
TEST(AcceptanceCuda, GreedyVerifyKernelEqualsTheReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 9);
  int every_draft = 0;
  for (const int32_t V : {1, 37, 6144, 129280}) {
    for (const int32_t d : {1, 3, 7, 8, 12}) {
      const int32_t B = V > 10000 ? 6 : 33;
      const AcceptBatch a = acceptance_test::greedy_batch(random_batch(rng, B, d, V, 3), rng);
      const Outputs want = run_ref(a);
      for (const int32_t acc : want.accepted) every_draft += acc == d;
      const acceptance_test::KeptForm random_kept = acceptance_test::kept_form(a, rng);
      acceptance_test::KeptForm kept[] = {random_kept, acceptance_test::kept_at_the_edges(a)};
      for (auto& k : kept) std::fill(k.shift.begin(), k.shift.end(), d + 5);
      const std::string what = "greedy V " + std::to_string(V) + " d " + std::to_string(d);
      const auto expect_want = [&](const std::string& form, int64_t stride,
                                   const acceptance_test::KeptForm* k, Greedy g) {
        Status st;
        EXPECT_EQ(run_cuda(a, &st, stride, k, g), want) << what << " " << form;
        EXPECT_TRUE(st.ok()) << what << " " << form << ": " << st.to_string();
      };
      expect_want("gathered", 0, nullptr, Greedy::kNullParams);
      expect_want("wide stride", int64_t{V} + 9, nullptr, Greedy::kNullParams);
      expect_want("kept at random", 0, &kept[0], Greedy::kNullParams);
      expect_want("kept at the edges", 0, &kept[1], Greedy::kNullParams);
      if (V == 6144 && d <= 3) {
        const testing::ScopedEnv off("DSA_ACCEPT_CLUSTER", "off");
        expect_want("count launch", 0, &kept[1], Greedy::kNullParams);
      }
      if (V == 6144) {
        const testing::ScopedEnv generic("DSA_ACCEPT_GREEDY", "generic");
        expect_want("generic", 0, &random_kept, Greedy::kWithParams);
      }
    }
  }
  EXPECT_GT(every_draft, 0) << "no request accepting every draft";
}

// A greedy verify's bad draft index (value 6, the one error it can report): that request accepts
// nothing and emits nothing, the others equal the reference; checked mode names the error.
TEST(AcceptanceCuda, GreedyVerifyBadDraftIndex) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 10);
  for (int32_t d : {3, 9}) {  // the cluster count and the count launch
    const int32_t n = d + 1;
    const AcceptBatch a = acceptance_test::greedy_batch(random_batch(rng, 4, d, 64, 3), rng);
    const Outputs good = run_ref(a);
    acceptance_test::KeptForm k = acceptance_test::kept_at_the_edges(a);
    k.index[size_t(2 * d + 1)] = d == 3 ? k.bound : -2;  // past either end
    for (bool checked : {true, false}) {
      ScopedCheckedMode mode(checked);
      Status st;
      const Outputs gpu = run_cuda(a, &st, 0, &k, Greedy::kNullParams);
      if (checked) {
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
      } else {
        EXPECT_TRUE(st.ok()) << st.to_string();
      }
      for (int32_t b : {0, 1, 3}) {
        EXPECT_EQ(gpu.accepted[size_t(b)], good.accepted[size_t(b)]) << "d " << d << " b " << b;
        for (int32_t j = 0; j < n; ++j) {
          EXPECT_EQ(gpu.emitted[size_t(b * n + j)], good.emitted[size_t(b * n + j)]);
        }
      }
      EXPECT_EQ(gpu.accepted[2], 0) << "d " << d;
      for (int32_t j = 0; j < n; ++j) EXPECT_EQ(gpu.emitted[size_t(2 * n + j)], -1) << "d " << d;
    }
  }
}

// A padded LM head's width as the row stride (V3.2: 129280 columns, here a smaller tokenizer).
TEST(AcceptanceCuda, RowStride) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 3);
  for (int32_t d : {0, 3}) {
    const AcceptBatch a = random_batch(rng, 12, d, 129000);
    const Outputs ref = run_ref(a);
    Status st;
    const Outputs gpu = run_cuda(a, &st, 129280);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_LE(compare(a, gpu, ref, "row stride d " + std::to_string(d)), 1);
  }
}

TEST(AcceptanceCuda, BadRequestParams) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 1);
  AcceptBatch a = random_batch(rng, 6, 3, 64, 0);
  for (auto& f : a.first_position) f = 100;
  const Outputs good = run_ref(a);
  a.temperature[1] = -1.f;
  a.top_p[2] = 0.f;
  a.top_k[3] = -2;
  a.first_position[4] = -1;
  a.first_position[5] = std::numeric_limits<int32_t>::max() - 2;  // + d leaves int32
  for (bool checked : {true, false}) {
    ScopedCheckedMode mode(checked);
    Status st;
    const Outputs gpu = run_cuda(a, &st);
    if (checked) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    } else {
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    EXPECT_EQ(gpu.accepted[0], good.accepted[0]);
    for (int32_t j = 0; j < 4; ++j) EXPECT_EQ(gpu.emitted[size_t(j)], good.emitted[size_t(j)]);
    for (int32_t b = 1; b < 6; ++b) {
      EXPECT_EQ(gpu.accepted[size_t(b)], 0) << "request " << b;
      for (int32_t j = 0; j < 4; ++j) EXPECT_EQ(gpu.emitted[size_t(b * 4 + j)], -1) << b;
    }
  }
  // Host checks.
  AcceptanceParams p;
  p.requests = 1;
  p.vocab = 8;
  EXPECT_EQ(accept_drafts_cuda(p).code(), StatusCode::kInvalidArgument);
  p.requests = 0;
  EXPECT_TRUE(accept_drafts_cuda(p).ok());
}

// The engine's overlapped form: drafts read from their slots, positions shifted on the device.
TEST(AcceptanceCuda, KeptDraftsAndShiftGiveTheGatheredAnswer) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 4);
  for (int32_t V : {37, 6144, 129280}) {
    for (int32_t d : {1, 3, 7, 9}) {
      const AcceptBatch a = random_batch(rng, V > 10000 ? 6 : 32, d, V);
      const acceptance_test::KeptForm k = acceptance_test::kept_form(a, rng);
      const std::string what = "kept V " + std::to_string(V) + " d " + std::to_string(d);
      EXPECT_LE(compare(a, run_cuda(a, nullptr, 0, &k), run_ref(a), what),
                std::max(1, a.requests / 50))
          << what;
    }
  }
}

// A shift outside [0, d] (value 5) or a draft index outside [-1, bound) (value 6): that request
// accepts nothing and emits nothing, the others are untouched; checked mode names the error.
TEST(AcceptanceCuda, BadKeptDraftsAndShift) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 5);
  for (int32_t d : {3, 9}) {  // the cluster count and the count launch
    const int32_t n = d + 1;
    AcceptBatch a = random_batch(rng, 4, d, 64, 0);
    for (auto& f : a.first_position) f = 100;
    for (auto& t : a.temperature) t = 0.f;  // greedy: the reference is exact
    const Outputs good = run_ref(a);
    acceptance_test::KeptForm k = acceptance_test::kept_form(a, rng);
    k.shift[1] = d + 1;
    k.index[size_t(2 * d + 1)] = d == 3 ? k.bound : -2;  // past either end
    for (bool checked : {true, false}) {
      ScopedCheckedMode mode(checked);
      Status st;
      const Outputs gpu = run_cuda(a, &st, 0, &k);
      if (checked) {
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
      } else {
        EXPECT_TRUE(st.ok()) << st.to_string();
      }
      for (int32_t b : {0, 3}) {
        EXPECT_EQ(gpu.accepted[size_t(b)], good.accepted[size_t(b)]) << "d " << d << " b " << b;
        for (int32_t j = 0; j < n; ++j) {
          EXPECT_EQ(gpu.emitted[size_t(b * n + j)], good.emitted[size_t(b * n + j)]);
        }
      }
      for (int32_t b : {1, 2}) {
        EXPECT_EQ(gpu.accepted[size_t(b)], 0) << "d " << d << " request " << b;
        for (int32_t j = 0; j < n; ++j) EXPECT_EQ(gpu.emitted[size_t(b * n + j)], -1) << b;
      }
    }
  }
}

TEST(AcceptanceCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 2);
  const AcceptBatch a = random_batch(rng, 16, 3, 129280);
  EXPECT_EQ(run_cuda(a), run_cuda(a));
}

}  // namespace
}  // namespace dsa::kernels
