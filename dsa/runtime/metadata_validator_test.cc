// Each invariant of SPEC.md §4.6 broken on purpose on a valid build, and reported by number.
#include "dsa/runtime/metadata_validator.h"

#include <gtest/gtest.h>

#include <functional>

#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/runtime_test_util.h"

namespace dsa::runtime {
namespace {

class ValidatorTest : public ::testing::Test {
 protected:
  ValidatorTest() : w(testing::small_config(3)), m(w.config) {}

  void build_verify() {
    ForwardBatch batch;
    batch.mode = ForwardMode::kTargetVerify;
    batch.batch_pad = 4;
    batch.requests = {w.request(62, 4), w.request(7, 4), w.request(200, 4)};
    ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
    ASSERT_TRUE(validate_forward_metadata(m, w.config, w.pages.page_table()).ok());
  }
  void build_extend() {
    ForwardBatch batch;
    batch.mode = ForwardMode::kExtend;
    batch.rows_pad = 90;
    batch.requests = {w.request(0, 70), w.request(20, 2), w.request(5, 4)};
    ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
    ASSERT_TRUE(validate_forward_metadata(m, w.config, w.pages.page_table()).ok());
  }
  void expect_broken(int invariant, std::optional<ForwardKey> key = std::nullopt) {
    Status s = validate_forward_metadata(m, w.config, w.pages.page_table(), key);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
    EXPECT_NE(s.message().find("invariant " + std::to_string(invariant) + " "), std::string::npos)
        << "expected invariant " << invariant << ", got: " << s.to_string();
  }
  testing::World w;
  ForwardMetadata m;
};

TEST_F(ValidatorTest, Inv1RealRowsBeforePadded) {
  build_verify();
  m.header.rows = 8;
  expect_broken(1);
}
TEST_F(ValidatorTest, Inv2RowToRequest) {
  build_verify();
  std::swap(m.row_req[3], m.row_req[4]);
  m.cu_q[1] = 4;  // keep the counts consistent so only the mapping is wrong
  expect_broken(2);
}
TEST_F(ValidatorTest, Inv3LengthAboveKvLen) {
  build_verify();
  m.row_len[5] = m.req_kv_len[1] + 1;
  m.row_topk_len[5] = std::min(m.row_len[5], 128);
  expect_broken(3);
}
TEST_F(ValidatorTest, Inv4TopkLength) {
  build_verify();
  m.row_topk_len[9] = m.row_len[9];  // 201 > K = 128
  expect_broken(4);
}
TEST_F(ValidatorTest, Inv5LengthsStepByOne) {
  build_verify();
  m.row_len[1] = m.row_len[0];
  m.row_topk_len[1] = std::min(m.row_len[1], 128);
  m.positions[1] = m.row_len[1] - 1;
  expect_broken(5);
}
TEST_F(ValidatorTest, Inv6Positions) {
  build_verify();
  m.positions[2] += 1;
  expect_broken(6);
}
TEST_F(ValidatorTest, Inv7DuplicateWriteSlot) {
  build_verify();
  m.write_slot[5] = m.write_slot[4];
  expect_broken(7);
}
TEST_F(ValidatorTest, Inv8PaddedRowWithPosition) {
  build_verify();
  m.positions[13] = 5;
  expect_broken(8);
}
TEST_F(ValidatorTest, Inv8PaddedRequestWithSlot) {
  build_verify();
  m.req_slot[3] = 7;
  expect_broken(8);
}
TEST_F(ValidatorTest, Inv8PaddedRowWithSlot) {
  build_verify();
  m.write_slot[12] = 64;
  expect_broken(8);
}
TEST_F(ValidatorTest, Inv9RepeatedRequestSlot) {
  build_verify();
  m.req_slot[1] = m.req_slot[0];
  expect_broken(9);
}
TEST_F(ValidatorTest, Inv10PageTableRowZero) {
  build_verify();
  kernels::PageTable pt = w.pages.page_table();
  std::vector<int32_t> copy(pt.data, pt.data + int64_t{pt.num_rows} * pt.width);
  copy[3] = 5;  // row 0 must be all zeros
  pt.data = copy.data();
  Status s = validate_forward_metadata(m, w.config, pt);
  EXPECT_NE(s.message().find("invariant 10 "), std::string::npos) << s.to_string();
}
TEST_F(ValidatorTest, Inv11PrefixSums) {
  build_verify();
  m.cu_kv[2] = 3;
  expect_broken(11);
}
TEST_F(ValidatorTest, Inv12PagedSubBatch) {
  build_extend();
  m.pg_row_len[1] += 1;
  expect_broken(12);
}
TEST_F(ValidatorTest, Inv12RaggedKsKe) {
  build_extend();
  m.ke[10] += 1;
  expect_broken(12);
}
TEST_F(ValidatorTest, Inv13Capacity) {
  build_verify();
  m.header.batch_pad = 25;
  expect_broken(13);
}
TEST_F(ValidatorTest, Inv14HeaderMagic) {
  build_verify();
  m.header.magic = 0;
  expect_broken(14);
}
TEST_F(ValidatorTest, Inv14ConsumedAsAnotherForward) {
  build_verify();
  expect_broken(14, ForwardKey{ModelKind::kMtp, ForwardMode::kDraftExtend, 4, 4});
  EXPECT_TRUE(
      validate_forward_metadata(m, w.config, w.pages.page_table(),
                                ForwardKey{ModelKind::kTarget, ForwardMode::kTargetVerify, 4, 4})
          .ok());
}
TEST_F(ValidatorTest, Inv15ScheduleFromOtherLengths) {
  build_verify();
  // A length changed after the schedule was built: consistent everywhere except the schedule.
  m.req_kv_len[1] += 1;
  for (int r = 4; r < 8; ++r) {
    m.row_len[r] += 1;
    m.positions[r] += 1;
  }
  m.write_slot[7] = m.write_slot[7];
  Status s = validate_forward_metadata(m, w.config, w.pages.page_table());
  // Positions moved, so the write-slot check (7) or the schedule check (15) reports it.
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
}
TEST_F(ValidatorTest, Inv15ScheduleHashAlone) {
  build_verify();
  m.schedule[8] ^= 1;  // len_hash word
  expect_broken(15);
}
TEST_F(ValidatorTest, Inv19NegativeValue) {
  build_verify();
  m.ks[0] = -4;
  expect_broken(19);
}

}  // namespace
}  // namespace dsa::runtime
