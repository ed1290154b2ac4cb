// SPEC.md inv. 16 for the device-built forwards of a speculative step (§6.7): the host builder's
// forward at a = 0 patched by the step commit op (kernels/step_commit, its CPU reference) equals,
// byte for byte, the host builder's forward at the accepted counts, over fuzzed batches:
//  - the DRAFT_EXTEND built with sample_first -1 and token rows [g_1..g_d, placeholder] against
//    the one built with sample_first a_b and token rows [.., y at a_b, .., y];
//  - the draft DECODE s built at C + s against the one at C + a + s, with the first step's hidden
//    rows b n against b n + a_b;
// padded requests, every accepted count, positions at page boundaries, and the schedule rebuilt
// from the patched row_len (what the forward does on the device) equal to the host's.
#include <gtest/gtest.h>

#include <random>

#include "dsa/kernels/step_commit/step_commit.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/metadata_schedule.h"
#include "dsa/runtime/runtime_test_util.h"

namespace dsa::runtime {
namespace {

struct Field {
  const char* name;
  std::vector<int32_t> ForwardMetadata::*v;
};
constexpr Field kFields[] = {{"row_len", &ForwardMetadata::row_len},
                             {"row_topk_len", &ForwardMetadata::row_topk_len},
                             {"row_req", &ForwardMetadata::row_req},
                             {"row_page", &ForwardMetadata::row_page},
                             {"positions", &ForwardMetadata::positions},
                             {"write_slot", &ForwardMetadata::write_slot},
                             {"ks", &ForwardMetadata::ks},
                             {"ke", &ForwardMetadata::ke},
                             {"sample_row", &ForwardMetadata::sample_row},
                             {"req_slot", &ForwardMetadata::req_slot},
                             {"req_kv_len", &ForwardMetadata::req_kv_len},
                             {"cu_q", &ForwardMetadata::cu_q},
                             {"cu_kv", &ForwardMetadata::cu_kv},
                             {"pg_req_slot", &ForwardMetadata::pg_req_slot},
                             {"pg_row_len", &ForwardMetadata::pg_row_len},
                             {"pg_row", &ForwardMetadata::pg_row},
                             {"schedule", &ForwardMetadata::schedule}};

kernels::StepCommitParams params_for(ForwardMetadata& m, const kernels::PageTable& pt,
                                     kernels::StepCommitTarget t, const std::vector<int32_t>& acc,
                                     const std::vector<int32_t>& emitted, int32_t d,
                                     std::vector<int32_t>& tokens, std::vector<int32_t>& hidden) {
  kernels::StepCommitParams p;
  p.target = t;
  p.accepted = acc.data();
  p.emitted = emitted.data();
  p.requests = m.header.num_requests;
  p.drafts_per_request = d;
  p.tokens = tokens.data();
  p.token_rows = nullptr;
  p.sample_row = m.sample_row.data();
  p.rows = {m.row_len.data(),   m.row_topk_len.data(), m.row_req.data(), m.row_page.data(),
            m.positions.data(), m.write_slot.data(),   m.ks.data(),      m.ke.data()};
  p.req_kv_len = m.req_kv_len.data();
  p.req_slot = m.req_slot.data();
  p.hidden_rows = hidden.empty() ? nullptr : hidden.data();
  p.page_table = pt;
  p.topk = m.header.topk;
  return p;
}

TEST(DeviceBuilder, CommittedZeroBuildEqualsTheHostBuildAtTheAcceptedCounts) {
  std::mt19937_64 rng(20261205);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int64_t compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t d = int32_t(pick(1, 7)), n = d + 1;
    testing::World w(testing::small_config(d));
    const int32_t B = int32_t(pick(1, 12)), B_pad = int32_t(pick(B, 16));
    std::vector<RequestInput> base;  // the verify's requests: cached C, n rows
    std::vector<int32_t> acc, emitted;
    for (int32_t b = 0; b < B; ++b) {
      // C near a page boundary half the time, so a + s crosses it.
      const int32_t C =
          pick(0, 1) ? int32_t(pick(1, 20)) * 64 - int32_t(pick(0, 2 * n)) : int32_t(pick(0, 1500));
      base.push_back(w.request(std::max(C, 0), 2 * n));  // pages for C + 2n (§6.4)
      base.back().new_len = n;
      const int32_t a = b <= d ? b : int32_t(pick(0, d));
      acc.push_back(a);
      for (int32_t j = 0; j < n; ++j) emitted.push_back(j <= a ? int32_t(pick(0, 999)) : -1);
    }
    const kernels::PageTable pt = w.pages.page_table();
    const auto build = [&](ForwardMode mode, std::vector<RequestInput> reqs, ForwardMetadata& m) {
      ForwardBatch batch;
      batch.model = ModelKind::kMtp;
      batch.mode = mode;
      batch.batch_pad = B_pad;
      batch.requests = std::move(reqs);
      const Status s = build_forward_metadata(batch, w.config, pt, m);
      ASSERT_TRUE(s.ok()) << s.message();
    };
    const auto expect_equal = [&](const ForwardMetadata& got, const ForwardMetadata& want,
                                  const char* what) {
      for (const Field& f : kFields) {
        EXPECT_EQ(got.*f.v, want.*f.v) << what << ": " << f.name << ", trial " << trial;
      }
      ++compared;
    };
    // The draft extend.
    {
      std::vector<RequestInput> zero = base, real = base;
      std::vector<int32_t> tokens, want_tokens;
      for (int32_t b = 0; b < B; ++b) {
        zero[size_t(b)].sample_first = -1;
        real[size_t(b)].sample_first = acc[size_t(b)];
        zero[size_t(b)].sample_count = real[size_t(b)].sample_count = 1;
        const int32_t a = acc[size_t(b)], y = emitted[size_t(b * n + a)];
        for (int32_t j = 0; j < n; ++j) {
          const int32_t g = 5000 + b * 10 + j;  // g_{j+1}
          tokens.push_back(j < d ? g : 0);
          want_tokens.push_back(j == a || j == d ? y : g);
        }
      }
      tokens.resize(size_t(B_pad * n), 0);
      want_tokens.resize(tokens.size(), 0);
      ForwardMetadata got(w.config), want(w.config);
      build(ForwardMode::kDraftExtend, zero, got);
      build(ForwardMode::kDraftExtend, real, want);
      std::vector<int32_t> no_hidden;
      ASSERT_TRUE(
          kernels::step_commit_ref(params_for(got, pt, kernels::StepCommitTarget::kDraftExtend, acc,
                                              emitted, d, tokens, no_hidden))
              .ok());
      expect_equal(got, want, "draft extend");
      EXPECT_EQ(tokens, want_tokens) << "trial " << trial;
    }
    // The draft decodes.
    for (int32_t s = 1; s < d; ++s) {
      std::vector<RequestInput> zero, real;
      std::vector<int32_t> hidden, want_hidden;
      for (int32_t b = 0; b < B; ++b) {
        const RequestInput& q = base[size_t(b)];
        zero.push_back({q.req_slot, q.cached_len + s, 1, 0, -1});
        real.push_back({q.req_slot, q.cached_len + acc[size_t(b)] + s, 1, 0, -1});
        hidden.push_back(b * n);
        want_hidden.push_back(b * n + acc[size_t(b)]);
      }
      ForwardMetadata got(w.config), want(w.config);
      build(ForwardMode::kDecode, zero, got);
      build(ForwardMode::kDecode, real, want);
      std::vector<int32_t> tokens(size_t(B_pad), 0);
      if (s > 1) hidden.clear(), want_hidden.clear();
      const Status st = kernels::step_commit_ref(params_for(
          got, pt, kernels::StepCommitTarget::kChainDecode, acc, emitted, d, tokens, hidden));
      ASSERT_TRUE(st.ok()) << st.message();
      // What the forward does first on the device: the schedule from the patched row_len.
      ASSERT_TRUE(build_metadata_schedule(w.config, got).ok());
      expect_equal(got, want, "draft decode");
      EXPECT_EQ(hidden, want_hidden) << "trial " << trial << " s " << s;
    }
  }
  EXPECT_GT(compared, 600);
}

}  // namespace
}  // namespace dsa::runtime
