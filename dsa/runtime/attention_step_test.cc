// The attention-only step on the CPU ops: verify == sequential decodes, draft-extend == decodes,
// EXTEND == uniform modes, and padded rows (bucket, DP, idle, n = 7 at seq_len 1) inert.
#include "dsa/runtime/attention_step.h"

#include <gtest/gtest.h>

#include "dsa/runtime/attention_world.h"
#include "dsa/runtime/metadata_validator.h"
#include "dsa/testing/random.h"

namespace dsa::runtime {
namespace {

using testing::AttentionWorld;
using testing::kMlaHeads;
using testing::StepBuffers;

MetadataConfig attention_config(int32_t d) {
  MetadataConfig c;
  c.num_draft_tokens = d;
  c.topk = 128;
  c.page_table_width = 12;  // 768 tokens per request
  c.num_consumers = 5;
  c.max_requests = 16;
  c.max_extend_rows = 2048;
  c.max_extend_kv = 4096;
  c.num_rows = 24;
  c.num_pages = 160;
  return c;
}

// One row of a forward: everything a consumer reads.
struct RowResult {
  std::vector<float> logits;  // visible columns only
  std::vector<int32_t> topk;
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

RowResult row_of(const StepBuffers& b, const ForwardMetadata& m, int32_t r, int64_t ld, int32_t k) {
  RowResult x;
  const int32_t len = m.row_len[size_t(r)];
  x.logits.assign(b.logits.begin() + r * ld, b.logits.begin() + r * ld + len);
  x.topk.assign(b.topk.begin() + int64_t(r) * k, b.topk.begin() + int64_t(r + 1) * k);
  for (int i = 0; i < kMlaHeads * 512; ++i)
    x.out.push_back(b.out[size_t(r) * kMlaHeads * 512 + i].bits);
  x.lse.assign(b.lse.begin() + r * kMlaHeads, b.lse.begin() + (r + 1) * kMlaHeads);
  return x;
}

void expect_same_row(const RowResult& a, const RowResult& b, const std::string& where) {
  ASSERT_EQ(a.logits.size(), b.logits.size()) << where;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    ASSERT_EQ(a.logits[i], b.logits[i]) << where << " logit column " << i;
  }
  EXPECT_EQ(a.topk, b.topk) << where;
  EXPECT_EQ(a.out, b.out) << where;
  EXPECT_EQ(a.lse, b.lse) << where;
}

void expect_inert_row(const StepBuffers& b, int32_t r, int32_t k, const std::string& where) {
  for (int i = 0; i < k; ++i) ASSERT_EQ(b.topk[size_t(r) * k + i], -1) << where;
  for (int i = 0; i < kMlaHeads * 512; ++i)
    ASSERT_EQ(b.out[size_t(r) * kMlaHeads * 512 + i].bits, 0) << where;
  for (int h = 0; h < kMlaHeads; ++h)
    ASSERT_EQ(b.lse[size_t(r) * kMlaHeads + h], INFINITY) << where;
}

// Requests with random committed lengths C (edges included); both worlds prefill identically.
struct Scenario {
  std::vector<int32_t> slots, cached;
  std::vector<int32_t> ids;
};

Scenario open_requests(AttentionWorld& w, dsa::testing::Rng& rng, int32_t count, int32_t n) {
  static const int32_t kEdges[] = {1, 2, 63, 64, 126, 127, 128, 200, 255, 300};
  Scenario s;
  for (int32_t b = 0; b < count; ++b) {
    s.slots.push_back(*w.pages.open_request());
    s.cached.push_back(rng.randint(0, 1) ? kEdges[rng.randint(0, 9)]
                                         : int32_t(rng.randint(1, 400)));
    s.ids.push_back(100 + b);
    EXPECT_TRUE(w.pages.reserve(s.slots.back(), s.cached.back() + n).ok());
  }
  return s;
}

Status prefill(AttentionWorld& w, const Scenario& s) {
  ForwardBatch batch;
  batch.mode = ForwardMode::kExtend;
  for (size_t b = 0; b < s.slots.size(); ++b)
    batch.requests.push_back({s.slots[b], 0, s.cached[b], 0, 0});
  std::vector<StepBuffers> res;
  return w.run(batch, s.ids, &res);
}

ForwardBatch uniform_batch(ForwardMode mode, const Scenario& s, std::vector<int32_t> cached,
                           int32_t n, int32_t batch_pad = 0) {
  ForwardBatch batch;
  batch.mode = mode;
  batch.model = mode == ForwardMode::kDraftExtend ? ModelKind::kMtp : ModelKind::kTarget;
  batch.batch_pad = batch_pad;
  for (size_t b = 0; b < s.slots.size(); ++b)
    batch.requests.push_back({s.slots[b], cached[b], n, 0, -1});
  return batch;
}

void verify_equals_decodes(ForwardMode mode, int32_t d, kernels::LatentFormat format) {
  const uint64_t seed = dsa::testing::test_seed();
  dsa::testing::Rng rng(seed);
  const int32_t n = d + 1;
  AttentionWorld a(attention_config(d), 2, format, seed), b(attention_config(d), 2, format, seed);
  dsa::testing::Rng rng_b(seed);
  Scenario sa = open_requests(a, rng, 5, n), sb = open_requests(b, rng_b, 5, n);
  ASSERT_EQ(sa.cached, sb.cached);
  ASSERT_TRUE(prefill(a, sa).ok());
  ASSERT_TRUE(prefill(b, sb).ok());

  std::vector<StepBuffers> multi;
  ForwardMetadata mm(a.config);
  ASSERT_TRUE(a.run(uniform_batch(mode, sa, sa.cached, n), sa.ids, &multi, &mm).ok());
  for (int32_t j = 0; j < n; ++j) {
    std::vector<int32_t> cached = sb.cached;
    for (auto& c : cached) c += j;
    std::vector<StepBuffers> one;
    ForwardMetadata m1(b.config);
    ASSERT_TRUE(b.run(uniform_batch(ForwardMode::kDecode, sb, cached, 1), sb.ids, &one, &m1).ok());
    for (size_t l = 0; l < multi.size(); ++l) {
      for (int32_t q = 0; q < int32_t(sa.slots.size()); ++q) {
        std::string where = std::string(mode_name(mode)) + " layer " + std::to_string(l) +
                            " request " + std::to_string(q) + " row " + std::to_string(j);
        expect_same_row(row_of(multi[l], mm, q * n + j, a.step.logits_ld(), 128),
                        row_of(one[l], m1, q, b.step.logits_ld(), 128), where);
      }
    }
  }
}

TEST(AttentionStep, TargetVerifyEqualsSequentialDecodesFp8Cache) {
  verify_equals_decodes(ForwardMode::kTargetVerify, 3, kernels::LatentFormat::kFp8_656);
}
TEST(AttentionStep, TargetVerifyEqualsSequentialDecodesBf16CacheN2) {
  verify_equals_decodes(ForwardMode::kTargetVerify, 1, kernels::LatentFormat::kBf16);
}
TEST(AttentionStep, DraftExtendEqualsSequentialDecodes) {
  verify_equals_decodes(ForwardMode::kDraftExtend, 3, kernels::LatentFormat::kFp8_656);
}

// Bucket padding: the same requests with B_pad = B and with B_pad = 2B + 3 give bit-identical real
// rows, inert padded rows, and byte-identical caches (padded rows wrote nothing).
TEST(AttentionStep, BucketPaddedRowsAreInert) {
  const uint64_t seed = dsa::testing::test_seed();
  const int32_t d = 3, n = 4;
  AttentionWorld a(attention_config(d), 2, kernels::LatentFormat::kFp8_656, seed);
  AttentionWorld b(attention_config(d), 2, kernels::LatentFormat::kFp8_656, seed);
  dsa::testing::Rng ra(seed), rb(seed);
  Scenario sa = open_requests(a, ra, 4, n), sb = open_requests(b, rb, 4, n);
  ASSERT_TRUE(prefill(a, sa).ok());
  ASSERT_TRUE(prefill(b, sb).ok());
  std::vector<StepBuffers> plain, padded;
  ForwardMetadata mp(a.config), mq(b.config);
  ASSERT_TRUE(
      a.run(uniform_batch(ForwardMode::kTargetVerify, sa, sa.cached, n), sa.ids, &plain, &mp).ok());
  ASSERT_TRUE(
      b.run(uniform_batch(ForwardMode::kTargetVerify, sb, sb.cached, n, 11), sb.ids, &padded, &mq)
          .ok());
  ASSERT_EQ(mq.header.rows_pad, 44);
  for (size_t l = 0; l < plain.size(); ++l) {
    for (int32_t r = 0; r < 16; ++r) {
      expect_same_row(row_of(plain[l], mp, r, a.step.logits_ld(), 128),
                      row_of(padded[l], mq, r, b.step.logits_ld(), 128),
                      "real row " + std::to_string(r));
    }
    for (int32_t r = 16; r < 44; ++r)
      expect_inert_row(padded[l], r, 128, "padded row " + std::to_string(r));
    EXPECT_TRUE(a.layers[l]->indexer.bytes() == b.layers[l]->indexer.bytes()) << "layer " << l;
    EXPECT_TRUE(a.layers[l]->latent.bytes() == b.layers[l]->latent.bytes()) << "layer " << l;
  }
}

// An idle rank runs the step's shape on padding only: nothing changes in any cache.
TEST(AttentionStep, IdleRankWritesNothingAndOutputsNothing) {
  const uint64_t seed = dsa::testing::test_seed();
  AttentionWorld w(attention_config(3), 2, kernels::LatentFormat::kFp8_656, seed);
  dsa::testing::Rng rng(seed);
  Scenario s = open_requests(w, rng, 3, 4);
  ASSERT_TRUE(prefill(w, s).ok());
  auto indexer_before = w.layers[0]->indexer.bytes();
  auto latent_before = w.layers[1]->latent.bytes();
  ForwardBatch idle;
  idle.mode = ForwardMode::kIdle;
  idle.idle_rows_per_request = 4;
  idle.batch_pad = 8;
  std::vector<StepBuffers> res;
  ASSERT_TRUE(w.run(idle, {}, &res).ok());
  for (auto& layer : res) {
    for (int32_t r = 0; r < 32; ++r) expect_inert_row(layer, r, 128, "idle row");
  }
  EXPECT_TRUE(w.layers[0]->indexer.bytes() == indexer_before);
  EXPECT_TRUE(w.layers[1]->latent.bytes() == latent_before);
}

// An idle rank in a DP step that runs as EXTEND (another rank prefills): one padded request of
// rows_pad rows, the agreed row count. Every row is inert and no cache changes.
TEST(AttentionStep, IdleRankInAnExtendStepWritesNothing) {
  const uint64_t seed = dsa::testing::test_seed();
  AttentionWorld w(attention_config(3), 2, kernels::LatentFormat::kFp8_656, seed);
  dsa::testing::Rng rng(seed);
  Scenario s = open_requests(w, rng, 3, 4);
  ASSERT_TRUE(prefill(w, s).ok());
  std::vector<std::vector<uint8_t>> before;
  for (auto& l : w.layers) {
    before.push_back(l->indexer.bytes());
    before.push_back(l->latent.bytes());
  }
  ForwardBatch idle;
  idle.mode = ForwardMode::kExtend;
  idle.rows_pad = 37;
  std::vector<StepBuffers> res;
  ForwardMetadata m(w.config);
  ASSERT_TRUE(w.run(idle, {}, &res, &m).ok());
  EXPECT_EQ(m.header.num_requests, 0);
  EXPECT_EQ(m.header.batch_pad, 1);
  ASSERT_EQ(m.header.rows_pad, 37);
  for (auto& layer : res) {
    for (int32_t r = 0; r < 37; ++r) expect_inert_row(layer, r, 128, "idle extend row");
  }
  for (size_t l = 0; l < w.layers.size(); ++l) {
    EXPECT_TRUE(w.layers[l]->indexer.bytes() == before[2 * l]) << "layer " << l;
    EXPECT_TRUE(w.layers[l]->latent.bytes() == before[2 * l + 1]) << "layer " << l;
  }
}

// d = 6 (n = 7): draft-extend over requests of one committed token (peers' seq_len = 1 padding
// case) in a padded bucket: no negative length anywhere, padded rows inert, validator clean.
TEST(AttentionStep, DraftExtendNSevenWithSeqLenOneInPaddedBucket) {
  const uint64_t seed = dsa::testing::test_seed();
  AttentionWorld w(attention_config(6), 2, kernels::LatentFormat::kFp8_656, seed);
  Scenario s;
  for (int b = 0; b < 2; ++b) {
    s.slots.push_back(*w.pages.open_request());
    s.cached.push_back(1);
    s.ids.push_back(b);
    ASSERT_TRUE(w.pages.reserve(s.slots.back(), 1 + 7).ok());
  }
  ASSERT_TRUE(prefill(w, s).ok());
  std::vector<StepBuffers> res;
  ForwardMetadata m(w.config);
  ForwardBatch batch = uniform_batch(ForwardMode::kDraftExtend, s, s.cached, 7, 6);
  for (auto& q : batch.requests) q.sample_first = 0;
  ASSERT_TRUE(w.run(batch, s.ids, &res, &m).ok());
  ASSERT_TRUE(validate_forward_metadata(m, w.config, w.pages.page_table()).ok());
  for (int32_t r = 0; r < m.header.rows_pad; ++r) ASSERT_GE(m.row_len[size_t(r)], 0);
  for (auto& layer : res) {
    for (int32_t r = 14; r < 42; ++r) expect_inert_row(layer, r, 128, "padded row");
    for (int32_t r = 0; r < 14; ++r) EXPECT_GE(layer.lse[size_t(r) * kMlaHeads], -1e30f);
  }
}

// EXTEND is a semantic superset: the same (cached_len, new_len) as a verify batch gives the same
// rows on the CPU, through the paged sub-batch (new_len <= d + 1); with DP row padding.
TEST(AttentionStep, ExtendCarryingVerifyRowsEqualsTargetVerify) {
  const uint64_t seed = dsa::testing::test_seed();
  const int32_t n = 4;
  AttentionWorld a(attention_config(3), 2, kernels::LatentFormat::kFp8_656, seed);
  AttentionWorld b(attention_config(3), 2, kernels::LatentFormat::kFp8_656, seed);
  dsa::testing::Rng ra(seed), rb(seed);
  Scenario sa = open_requests(a, ra, 4, n), sb = open_requests(b, rb, 4, n);
  ASSERT_TRUE(prefill(a, sa).ok());
  ASSERT_TRUE(prefill(b, sb).ok());
  std::vector<StepBuffers> verify, extend;
  ForwardMetadata mv(a.config), me(b.config);
  ASSERT_TRUE(
      a.run(uniform_batch(ForwardMode::kTargetVerify, sa, sa.cached, n), sa.ids, &verify, &mv)
          .ok());
  ForwardBatch eb = uniform_batch(ForwardMode::kExtend, sb, sb.cached, n);
  eb.rows_pad = 21;
  ASSERT_TRUE(b.run(eb, sb.ids, &extend, &me).ok());
  ASSERT_EQ(me.header.paged_requests, 4);
  for (size_t l = 0; l < verify.size(); ++l) {
    for (int32_t r = 0; r < 16; ++r) {
      expect_same_row(row_of(verify[l], mv, r, a.step.logits_ld(), 128),
                      row_of(extend[l], me, r, b.step.logits_ld(), 128),
                      "row " + std::to_string(r));
    }
    for (int32_t r = 16; r < 21; ++r) expect_inert_row(extend[l], r, 128, "DP padded row");
    EXPECT_TRUE(a.layers[l]->indexer.bytes() == b.layers[l]->indexer.bytes());
  }
}

// A long EXTEND chunk (ragged path: gather + ragged logits) continuing a cached prefix gives the
// same rows as decoding those tokens one by one.
TEST(AttentionStep, RaggedExtendChunkEqualsSequentialDecodes) {
  const uint64_t seed = dsa::testing::test_seed();
  AttentionWorld a(attention_config(1), 1, kernels::LatentFormat::kBf16, seed);
  AttentionWorld b(attention_config(1), 1, kernels::LatentFormat::kBf16, seed);
  const int32_t prefix = 100, chunk = 60;
  Scenario sa, sb;
  for (AttentionWorld* w : {&a, &b}) {
    Scenario& s = w == &a ? sa : sb;
    s.slots.push_back(*w->pages.open_request());
    s.cached.push_back(prefix);
    s.ids.push_back(7);
    ASSERT_TRUE(w->pages.reserve(s.slots[0], prefix + chunk).ok());
    ASSERT_TRUE(prefill(*w, s).ok());
  }
  ForwardBatch eb;
  eb.mode = ForwardMode::kExtend;
  eb.requests.push_back({sa.slots[0], prefix, chunk, 0, 0});
  std::vector<StepBuffers> ext;
  ForwardMetadata me(a.config);
  ASSERT_TRUE(a.run(eb, sa.ids, &ext, &me).ok());
  ASSERT_EQ(me.header.paged_requests, 0);
  for (int32_t j = 0; j < chunk; ++j) {
    std::vector<StepBuffers> one;
    ForwardMetadata m1(b.config);
    ASSERT_TRUE(
        b.run(uniform_batch(ForwardMode::kDecode, sb, {prefix + j}, 1), sb.ids, &one, &m1).ok());
    expect_same_row(row_of(ext[0], me, j, a.step.logits_ld(), 128),
                    row_of(one[0], m1, 0, b.step.logits_ld(), 128),
                    "chunk row " + std::to_string(j));
  }
}

}  // namespace
}  // namespace dsa::runtime
