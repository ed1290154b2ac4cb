// The model's load options and its forward over a ForwardBatch (metadata built inside, tokens and
// hidden rows padded to the bucket) on the CPU with the shipped tiny checkpoint.
#include "dsa/model/dsa_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace dsa::model {
namespace {

using runtime::ForwardMode;
using runtime::ModelKind;

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

std::string model_dir() { return std::string(DSA_SOURCE_DIR) + "/models/tiny-dsa"; }

TEST(GraphOptions, RejectedWhereTheyCannotWork) {
  ModelOptions o;
  o.max_requests = 4;
  o.cuda_graphs = true;
  auto m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("cuda_graphs"), std::string::npos) << m.status().to_string();
  o.cuda_graphs = false;
  o.buckets = {1, 8};
  m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("buckets: 8"), std::string::npos) << m.status().to_string();
  o.buckets = {2, 1};
  m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ascending"), std::string::npos) << m.status().to_string();
}

TEST(DsaModelForward, PadsToTheBucketAndReportsWhereRowsLanded) {
  ModelOptions o;
  o.max_requests = 4;
  o.max_context = 256;
  o.num_draft_tokens = 1;
  o.buckets = {1, 2, 4};
  auto m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  DsaModel& model = **m;
  auto a = model.pages().open_request(), b = model.pages().open_request(),
       c = model.pages().open_request();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (int32_t slot : {*a, *b, *c}) ASSERT_TRUE(model.pages().reserve(slot, 12).ok());
  runtime::ForwardBatch fb;
  fb.mode = ForwardMode::kTargetVerify;
  fb.requests = {{*a, 4, 2, 0, -1}, {*b, 7, 2, 0, -1}, {*c, 1, 2, 0, -1}};
  const std::vector<int32_t> tokens = {11, 12, 13, 14, 15, 16};
  ForwardOutput out;
  Status s = model.forward(fb, tokens, {}, &out);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(out.header.batch_pad, 4);  // 3 requests -> bucket 4
  EXPECT_EQ(out.header.rows, 6);
  EXPECT_EQ(out.header.rows_pad, 8);
  EXPECT_EQ(out.row_start, (std::vector<int32_t>{0, 2, 4}));
  ASSERT_EQ(out.sample_row.size(), size_t(out.header.num_samples));
  EXPECT_EQ(out.sample_row[5], 5);
  EXPECT_EQ(out.hidden.size(), size_t(8) * size_t(model.config().hidden_size));
  EXPECT_EQ(out.logits.size(), size_t(out.header.num_samples) * size_t(model.config().vocab_size));

  // The same batch with its padding given explicitly, and the padded tokens written out: equal.
  fb.batch_pad = 4;
  std::vector<int32_t> padded = tokens;
  padded.resize(8, 0);
  ForwardOutput explicit_pad;
  ASSERT_TRUE(model.forward(fb, padded, {}, &explicit_pad).ok());
  EXPECT_TRUE(same_bits(explicit_pad.hidden, out.hidden));
  EXPECT_EQ(explicit_pad.logits, out.logits);

  // The MTP layer needs the hidden rows of every real row; zeros pad the rest.
  runtime::ForwardBatch mb = fb;
  mb.batch_pad = 0;
  mb.model = ModelKind::kMtp;
  mb.mode = ForwardMode::kDraftExtend;
  for (runtime::RequestInput& r : mb.requests) r.sample_count = 1;
  const size_t D = size_t(model.config().hidden_size);
  const std::vector<bf16> real_rows(out.hidden.begin(), out.hidden.begin() + long(6 * D));
  ForwardOutput mtp, mtp_full;
  ASSERT_TRUE(model.forward(mb, tokens, real_rows, &mtp).ok());
  std::vector<bf16> zero_padded = real_rows;
  zero_padded.resize(8 * D, bf16{});
  ASSERT_TRUE(model.forward(mb, tokens, zero_padded, &mtp_full).ok());
  EXPECT_EQ(mtp.logits, mtp_full.logits);
  EXPECT_EQ(mtp.sample_row, mtp_full.sample_row);
  const std::vector<bf16> short_hidden(real_rows.begin(), real_rows.end() - long(D));
  s = model.forward(mb, tokens, short_hidden, &mtp);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
}

TEST(DsaModelForward, BadBatchesAreRefusedBeforeAnythingRuns) {
  ModelOptions o;
  o.max_requests = 2;
  o.max_context = 256;
  auto m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  DsaModel& model = **m;
  auto a = model.pages().open_request();
  ASSERT_TRUE(a.ok() && model.pages().reserve(*a, 10).ok());
  runtime::ForwardBatch fb;
  fb.mode = ForwardMode::kDecode;
  fb.requests = {{*a, 9, 1, 0, -1}};
  ForwardOutput out;
  Status s = model.forward(fb, {}, {}, &out);  // no token for the request's row
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  fb.requests = {{*a, 100, 1, 0, -1}};  // a position whose page was never reserved
  const std::vector<int32_t> one = {5};
  s = model.forward(fb, one, {}, &out);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  fb.model = ModelKind::kMtp;  // d = 0: an MTP forward has no hidden rows to pair with
  fb.requests = {{*a, 9, 1, 0, -1}};
  s = model.forward(fb, one, {}, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_EQ(model.timing().forwards, 0);
}

}  // namespace
}  // namespace dsa::model
