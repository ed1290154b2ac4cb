// The DP step agreement on hand-made cases: how differing ranks are reconciled (docs/multi_gpu.md),
// the proposal checks, and that an idle rank's all-padding forwards pass the real builder and
// validator with inert rows.
#include "dsa/engine/dp_step.h"

#include <gtest/gtest.h>

#include "dsa/engine/dp_test_util.h"
#include "dsa/runtime/graph_runner.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/metadata_validator.h"
#include "dsa/runtime/page_pool.h"
#include "dsa/runtime/runtime_test_util.h"

namespace dsa::engine {
namespace {

using namespace std::chrono_literals;
using runtime::ForwardMode;
using runtime::ModelKind;

DpStepConfig config(int32_t d, std::vector<int32_t> buckets = {1, 2, 4, 8}) {
  DpStepConfig c;
  c.num_draft_tokens = d;
  c.buckets = std::move(buckets);
  c.max_requests = 24;
  c.max_extend_rows = 1024;
  return c;
}

// Every rank proposes its own entry of `props`; returns each rank's plan.
std::vector<StatusOr<StepPlan>> agree(const std::vector<StepProposal>& props,
                                      const DpStepConfig& c) {
  auto g = dist::LocalGroup::create(int32_t(props.size()), 2000ms);
  DSA_CHECK(g.ok());
  return testing::run_ranks<StatusOr<StepPlan>>(
      **g, [&](dist::Collective& col) { return agree_step(col, props[size_t(col.rank())], c); });
}

StepProposal decoding(int32_t b, int32_t d, int64_t load = 0) {
  return {7, 0, b * (d + 1), b, b, load};
}

TEST(DpStep, PrefillOnOneRankMakesEveryRankRunExtend) {
  const int32_t d = 3;
  // Rank 0 prefills 100 rows, rank 1 only decodes (2 requests, 8 rows as EXTEND), rank 2 is idle.
  std::vector<StepProposal> props = {{7, 1, 100, 0, 1, 10}, decoding(2, d, 20), decoding(0, d)};
  auto plans = agree(props, config(d));
  for (auto& p : plans) {
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->kind, StepKind::kExtend);
    EXPECT_EQ(p->rows_pad, 100);
    EXPECT_EQ(p->chain_pad, 2);  // bucket >= max(1, 2, 0)
    EXPECT_EQ(p->loads, (std::vector<int64_t>{10, 20, 0}));
  }
  auto f = step_forwards(*plans[0], config(d));
  ASSERT_EQ(f.size(), 4u);  // target EXTEND, MTP EXTEND, 2 chain DECODEs
  EXPECT_EQ(f[0].mode, ForwardMode::kExtend);
  EXPECT_EQ(f[0].model, ModelKind::kTarget);
  EXPECT_EQ(f[1].mode, ForwardMode::kExtend);
  EXPECT_EQ(f[1].model, ModelKind::kMtp);
  EXPECT_EQ(f[1].rows_pad, 100);
  EXPECT_EQ(f[3].mode, ForwardMode::kDecode);
  EXPECT_EQ(f[3].chain_step, 2);
  EXPECT_EQ(f[3].batch_pad, 2);
}

TEST(DpStep, DecodeOnlyStepsShareTheBucketOfTheLargestBatch) {
  const int32_t d = 2;
  auto plans = agree({decoding(3, d), decoding(0, d), decoding(5, d)}, config(d));
  for (auto& p : plans) {
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->kind, StepKind::kUniform);
    EXPECT_EQ(p->batch_pad, 8);
    EXPECT_EQ(p->chain_pad, 8);
  }
  auto f = step_forwards(*plans[1], config(d));
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].mode, ForwardMode::kTargetVerify);
  EXPECT_EQ(f[0].rows_pad, 24);
  EXPECT_EQ(f[0].samples, 24);  // verify samples every row
  EXPECT_EQ(f[1].mode, ForwardMode::kDraftExtend);
  EXPECT_EQ(f[1].samples, 8);
  EXPECT_EQ(f[2].rows_per_request, 1);
  // Above the largest bucket the step runs eagerly at the largest B itself.
  auto eager = agree({decoding(3, 0), decoding(5, 0)}, config(0, {1, 2}));
  ASSERT_TRUE(eager[0].ok());
  EXPECT_EQ(eager[0]->batch_pad, 5);
  EXPECT_EQ(eager[0]->chain_pad, 0);
  EXPECT_EQ(step_forwards(*eager[0], config(0)).size(), 1u);
}

TEST(DpStep, NoWorkAnywhereRunsNoForward) {
  auto plans = agree({decoding(0, 1), decoding(0, 1)}, config(1));
  ASSERT_TRUE(plans[0].ok());
  EXPECT_EQ(plans[0]->kind, StepKind::kNone);
  EXPECT_TRUE(step_forwards(*plans[0], config(1)).empty());
}

TEST(DpStep, RanksOutOfStepAreAnErrorOnEveryRank) {
  StepProposal late = decoding(1, 1);
  late.step = 8;
  auto plans = agree({decoding(1, 1), late}, config(1));
  for (auto& p : plans) {
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("span steps [7, 8]"), std::string::npos)
        << p.status().to_string();
  }
}

TEST(DpStep, InconsistentProposalsNameTheField) {
  const DpStepConfig c = config(3);
  struct Case {
    StepProposal p;
    const char* expect;
  } cases[] = {
      {{-1, 0, 0, 0, 0, 0}, "step = -1"},         {{0, 0, 0, 0, 0, -5}, "load = -5"},
      {{0, 0, 3, 1, 1, 0}, "extend_rows = 3"},   // one decode request is 4 rows
      {{0, 2, 5, 1, 1, 0}, "extend_rows = 5"},   // 4 carried + >= 2 for the chunks
      {{0, 1, 2000, 0, 1, 0}, "exceeds T_ext"},  // over T_ext
      {{0, 1, 9, 2, 4, 0}, "chain_requests = 4"}, {{0, 20, 40, 5, 5, 0}, "exceeds B_max"},
  };
  for (const Case& k : cases) {
    Status s = validate(k.p, c);
    ASSERT_FALSE(s.ok()) << k.expect;
    EXPECT_NE(s.message().find(k.expect), std::string::npos) << s.to_string();
  }
  DpStepConfig bad = c;
  bad.buckets = {1, 4, 2};
  EXPECT_NE(validate(decoding(1, 3), bad).message().find("buckets[2] = 2"), std::string::npos);
  DpStepConfig narrow = c;
  narrow.max_extend_rows = 95;  // 24 decode requests of 4 rows need 96
  EXPECT_NE(validate(decoding(1, 3), narrow).message().find("max_extend_rows = 95"),
            std::string::npos);
  // Phased steps (the engine's): EXTEND carries prompt chunks only, so T_ext needs no room for
  // the decodes.
  narrow.extend_carries_decodes = false;
  EXPECT_TRUE(validate(decoding(1, 3), narrow).ok());
  // ... nor is a phased decode part bounded by T_ext: B_max requests of n rows each exceed it
  // (24 x 4 = 96 > 95) and still run as DECODE / TARGET_VERIFY.
  EXPECT_TRUE(validate(decoding(24, 3), narrow).ok())
      << validate(decoding(24, 3), narrow).to_string();
  // A prefill part is an EXTEND: its rows stay bounded.
  const Status chunk = validate({7, 1, 96, 0, 1, 0}, narrow);
  EXPECT_NE(chunk.message().find("exceeds T_ext = 95"), std::string::npos) << chunk.to_string();
}

TEST(DpStep, MakeBatchRefusesRequestsBeyondTheAgreedShape) {
  const ForwardShape verify{
      ForwardRole::kTarget, 0, ModelKind::kTarget, ForwardMode::kTargetVerify, 2, 8, 4};
  std::vector<runtime::RequestInput> three(3, {1, 10, 4, 0, -1});
  auto b = make_batch(verify, three, 0);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("3 requests: more than the agreed B_pad = 2"),
            std::string::npos);
  auto rows = make_batch(verify, {{1, 10, 3, 0, -1}}, 0);
  EXPECT_NE(rows.status().message().find("requests[0].new_len = 3"), std::string::npos);
  const ForwardShape extend{
      ForwardRole::kTarget, 0, ModelKind::kTarget, ForwardMode::kExtend, 0, 50, 0};
  auto ext = make_batch(extend, {{1, 0, 51, 50, 1}}, 0);
  EXPECT_NE(ext.status().message().find("51 rows: more than the agreed rows_pad = 50"),
            std::string::npos);
}

// Every forward an idle rank can be asked to run: built by the real builder, accepted by the
// validator, the shape read back equal to the agreed one, and every row inert.
TEST(DpStep, IdleRankForwardsAreAllPaddingAndValid) {
  for (int32_t d : {0, 1, 3}) {
    const runtime::MetadataConfig mc = runtime::testing::small_config(d);
    runtime::PagedCacheManager pages(mc.num_pages, mc.num_rows, mc.page_table_width);
    for (StepKind kind : {StepKind::kUniform, StepKind::kExtend}) {
      StepPlan plan{kind, 16, 333, d > 1 ? 4 : 0, {}};
      for (const ForwardShape& shape : step_forwards(plan, config(d))) {
        auto batch = make_batch(shape, {}, 5);
        ASSERT_TRUE(batch.ok()) << batch.status().to_string();
        runtime::ForwardMetadata m(mc);
        // Junk in every buffer first: the build must overwrite each entry it exposes.
        for (auto* v : {&m.row_len, &m.positions, &m.row_page}) std::fill(v->begin(), v->end(), 9);
        std::fill(m.write_slot.begin(), m.write_slot.end(), 64);
        ASSERT_TRUE(runtime::build_forward_metadata(*batch, mc, pages.page_table(), m).ok());
        ASSERT_TRUE(runtime::validate_forward_metadata(m, mc, pages.page_table()).ok());
        EXPECT_EQ(shape_of(m.header, shape.role, shape.chain_step), shape);
        // The same forward as the graph capture builds it (the mode itself, no requests): an
        // idle rank's header launches what a busy rank's graph of that key launches.
        if (shape.mode != ForwardMode::kExtend) {
          runtime::ForwardBatch capture;
          capture.model = shape.model;
          capture.mode = shape.mode;
          capture.batch_pad = shape.batch_pad;
          runtime::ForwardMetadata c(mc);
          ASSERT_TRUE(runtime::build_forward_metadata(capture, mc, pages.page_table(), c).ok());
          EXPECT_EQ(c.header.num_samples, m.header.num_samples);
          EXPECT_EQ(c.header.rows_pad, m.header.rows_pad);
          EXPECT_EQ(runtime::graph_key(c.header), runtime::graph_key(m.header));
        }
        EXPECT_EQ(m.header.rows, 0);
        ASSERT_EQ(m.header.rows_pad, shape.rows_pad);
        for (int32_t r = 0; r < m.header.rows_pad; ++r) {
          EXPECT_EQ(m.row_len[size_t(r)], 0);
          EXPECT_EQ(m.positions[size_t(r)], 0);
          EXPECT_EQ(m.row_page[size_t(r)], 0);
          EXPECT_EQ(m.write_slot[size_t(r)], -1);
        }
        for (int32_t b = 0; b < m.header.batch_pad; ++b) EXPECT_EQ(m.req_slot[size_t(b)], 0);
      }
    }
  }
}

TEST(DpStep, CrossCheckFindsRanksRunningDifferentForwards) {
  auto g = dist::LocalGroup::create(3, 2000ms);
  ASSERT_TRUE(g.ok());
  auto st = testing::run_ranks<Status>(**g, [&](dist::Collective& c) {
    ForwardShape s{ForwardRole::kTarget, 0, ModelKind::kTarget, ForwardMode::kDecode, 4, 4, 1};
    if (c.rank() == 2) s.batch_pad = s.rows_pad = 8;  // rank 2 took another bucket
    return cross_check_forward(c, s);
  });
  for (const Status& s : st) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("batch_pad spans [4, 8]"), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace dsa::engine
