// GPU test of row_copy_cuda against the CPU reference on fresh random rows: bit-identical for the
// 16-byte path and the byte path, as gather (skipped rows left or zeroed) and as scatter,
// untouched bytes included.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/gather/row_copy.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::dev;
using testing::host;
using testing::Rng;

TEST(RowCopyCuda, BitIdentical) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode off(false);  // the reference would refuse the index past index_bound
  Rng rng(testing::test_seed() + 3);
  for (int64_t row_bytes : {int64_t{2048}, int64_t{64}, int64_t{6}}) {
    const int32_t src_rows = 50, rows = 20;
    const int64_t stride = row_bytes + 16;
    std::vector<uint8_t> src(size_t(src_rows * stride));
    for (auto& b : src) b = uint8_t(rng.randint(0, 255));
    std::vector<int32_t> idx(rows);
    for (int32_t i = 0; i < rows; ++i) idx[size_t(i)] = i % 7 == 3 ? -1 : (i * 13) % src_rows;
    idx[5] = src_rows + 2;  // past index_bound: skipped (zeroed with zero_skipped), unchecked
    // Gather, gather with the skipped rows zeroed, scatter.
    for (int variant = 0; variant < 3; ++variant) {
      const RowCopyMode mode = variant < 2 ? RowCopyMode::kGather : RowCopyMode::kScatter;
      const bool gather = mode == RowCopyMode::kGather;
      const int32_t dst_rows = gather ? rows : src_rows;
      std::vector<uint8_t> want(size_t(dst_rows * stride), 0x5A);
      RowCopyParams p{src.data(), want.data(), idx.data(), stride, stride,
                      row_bytes,  rows,        src_rows,   mode};
      p.zero_skipped = variant == 1;
      ASSERT_TRUE(row_copy_ref(p).ok());
      auto ds = dev(src), dd = dev(std::vector<uint8_t>(want.size(), 0x5A));
      auto di = dev(idx);
      p.src = ds.data(), p.dst = dd.data(), p.index = di.data();
      ASSERT_TRUE(row_copy_cuda(p).ok());
      EXPECT_EQ(host(dd), want) << "row_bytes " << row_bytes << (gather ? " gather" : " scatter")
                                << (p.zero_skipped ? ", skipped rows zeroed" : "");
    }
  }
}

}  // namespace
}  // namespace dsa::kernels
