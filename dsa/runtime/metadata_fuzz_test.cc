// Fuzz: >= 10,000 random batch compositions over every mode, n = 1..8, several buckets, lengths
// at 0/1, page boundaries and K; every build passes the validator and is deterministic.
#include <gtest/gtest.h>

#include <cstdio>

#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/metadata_validator.h"
#include "dsa/runtime/runtime_test_util.h"
#include "dsa/testing/random.h"

namespace dsa::runtime {
namespace {

using dsa::testing::Rng;

int32_t random_cached_len(Rng& rng, int32_t max_len) {
  static const int32_t kEdges[] = {0, 1, 63, 64, 65, 127, 128, 129, 255, 256};
  int32_t v = rng.randint(0, 2) ? kEdges[rng.randint(0, 9)] : int32_t(rng.randint(0, max_len));
  return std::min(v, max_len);
}

ForwardBatch random_batch(Rng& rng, testing::World& w) {
  static const int32_t kBuckets[] = {1, 2, 4, 8, 16, 24};
  ForwardBatch batch;
  batch.mode = kAllForwardModes[rng.randint(0, 4)];
  batch.model = rng.randint(0, 1) ? ModelKind::kTarget : ModelKind::kMtp;
  batch.forward_id = rng.randint(0, 1 << 30);
  const int32_t d = w.config.num_draft_tokens;
  const int32_t n = batch.mode == ForwardMode::kIdle ? int32_t(rng.randint(1, d + 1))
                                                     : uniform_rows_per_request(batch.mode, d);
  batch.idle_rows_per_request = n;
  const int32_t num_req = batch.mode == ForwardMode::kIdle ? 0 : int32_t(rng.randint(0, 12));
  const int32_t max_kv = w.config.page_table_width * kernels::kPageSize;
  int32_t rows = 0;
  for (int32_t b = 0; b < num_req; ++b) {
    int32_t new_len =
        batch.mode == ForwardMode::kExtend
            ? (rng.randint(0, 1) ? int32_t(rng.randint(1, d + 1)) : int32_t(rng.randint(1, 200)))
            : n;
    int32_t cached = random_cached_len(rng, std::min(max_kv - new_len, 700));
    if (w.pages.num_free_pages() < (cached + new_len) / 64 + 2) break;
    if (rows + new_len + 40 > w.config.max_extend_rows) break;
    RequestInput q = w.request(cached, new_len);
    q.sample_first =
        batch.mode == ForwardMode::kDraftExtend ? int32_t(rng.randint(0, n - 1)) : new_len - 1;
    q.sample_count = batch.mode == ForwardMode::kExtend ? int32_t(rng.randint(0, 1)) : -1;
    batch.requests.push_back(q);
    rows += new_len;
  }
  const int32_t real = static_cast<int32_t>(batch.requests.size());
  if (is_uniform(batch.mode)) {
    int32_t bucket = kBuckets[rng.randint(0, 5)];
    batch.batch_pad = std::max(bucket, real);  // a bucket, or DP's agreed count
    if (batch.batch_pad == 0) batch.batch_pad = 1;
  } else if (rng.randint(0, 1)) {
    batch.rows_pad = rows + int32_t(rng.randint(0, 40));
  }
  return batch;
}

TEST(MetadataFuzz, TenThousandCompositionsPassTheValidatorAndAreDeterministic) {
  Rng rng(dsa::testing::test_seed());
  int built = 0;
  int64_t real_rows = 0, padded_rows = 0;
  for (int32_t d = 0; d <= 7; ++d) {
    testing::World w(testing::small_config(d));
    ForwardMetadata a(w.config), b(w.config);
    for (int iter = 0; iter < 1300; ++iter) {
      ForwardBatch batch = random_batch(rng, w);
      Status s = build_forward_metadata(batch, w.config, w.pages.page_table(), a);
      ASSERT_TRUE(s.ok()) << "d = " << d << " iter " << iter << ": " << s.to_string();
      Status v = validate_forward_metadata(a, w.config, w.pages.page_table());
      ASSERT_TRUE(v.ok()) << "d = " << d << " iter " << iter << " mode " << mode_name(batch.mode)
                          << ": " << v.to_string();
      ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), b).ok());
      ASSERT_EQ(a.row_len, b.row_len);
      ASSERT_EQ(a.write_slot, b.write_slot);
      ASSERT_EQ(a.schedule, b.schedule);
      ASSERT_EQ(a.sample_row, b.sample_row);
      ASSERT_EQ(a.pg_row_len, b.pg_row_len);
      ASSERT_TRUE(a.header == b.header);
      for (const RequestInput& q : batch.requests)
        ASSERT_TRUE(w.pages.close_request(q.req_slot).ok());
      ++built;
      real_rows += a.header.rows;
      padded_rows += a.header.rows_pad - a.header.rows;
    }
  }
  EXPECT_GE(built, 10000);
  std::printf("built %d forwards: %lld real rows, %lld padded rows\n", built, (long long)real_rows,
              (long long)padded_rows);
  EXPECT_GT(real_rows, 100000);
  EXPECT_GT(padded_rows, 10000);
}

}  // namespace
}  // namespace dsa::runtime
