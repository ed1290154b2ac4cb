// GPU tests of sparse_mla_decode_cuda / sparse_mla_prefill_cuda against the CPU reference with
// the §3f tolerance (sparse_mla_*_bounds): small and V3.2 shapes, both cache formats, -1 slots,
// topk_len < K, empty and single-key rows, split and non-split decode (each deterministic),
// checked-mode error word and unchecked-mode neutralisation, prefill from contiguous bf16 rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_test_util.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using test::DecodeCase;
using testing::dev;
using testing::dev_alloc;
using testing::Rng;

struct GpuOut {
  std::vector<bf16> out;
  std::vector<float> lse, max_logit;
};

bool same_bits(const GpuOut& a, const GpuOut& b) {
  return a.out.size() == b.out.size() &&
         std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(bf16)) == 0 &&
         std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0 &&
         std::memcmp(a.max_logit.data(), b.max_logit.data(), a.max_logit.size() * 4) == 0;
}

// Every element of a GPU result against the reference (ref_out/ref_lse/ref_max) and its bounds.
// Rows with an empty attended set (reference lse = +inf) must match exactly: +0 bits, +inf.
void expect_within(const std::string& what, const SparseMlaBounds& b,
                   const std::vector<bf16>& ref_out, const std::vector<float>& ref_lse,
                   const GpuOut& g, const std::vector<float>* ref_max = nullptr) {
  ASSERT_EQ(g.out.size(), ref_out.size());
  ASSERT_EQ(g.lse.size(), ref_lse.size());
  int failures = 0;
  auto fail = [&](const std::string& msg) {
    if (++failures <= 8) ADD_FAILURE() << what << ": " << msg;
  };
  for (size_t rh = 0; rh < ref_lse.size(); ++rh) {
    if (std::isinf(ref_lse[rh])) {
      if (!(g.lse[rh] == INFINITY))
        fail("rh " + std::to_string(rh) + " empty: lse " + std::to_string(g.lse[rh]) + " != +inf");
      for (int c = 0; c < kVDim; ++c) {
        if (g.out[rh * kVDim + c].bits != 0) {
          fail("rh " + std::to_string(rh) + " empty: out[" + std::to_string(c) + "] bits " +
               std::to_string(g.out[rh * kVDim + c].bits) + " != +0");
          break;
        }
      }
      if (ref_max != nullptr && !(g.max_logit[rh] == -INFINITY)) {
        fail("rh " + std::to_string(rh) + " empty: max_logit != -inf");
      }
      continue;
    }
    const double dl = std::fabs(double{g.lse[rh]} - ref_lse[rh]);
    if (!(dl <= b.lse[rh])) {
      fail("rh " + std::to_string(rh) + ": lse " + std::to_string(g.lse[rh]) + " vs ref " +
           std::to_string(ref_lse[rh]) + " (bound " + std::to_string(b.lse[rh]) + ")");
    }
    if (ref_max != nullptr) {
      const double dm = std::fabs(double{g.max_logit[rh]} - (*ref_max)[rh]);
      if (!(dm <= b.lse[rh])) {
        fail("rh " + std::to_string(rh) + ": max_logit " + std::to_string(g.max_logit[rh]) +
             " vs ref " + std::to_string((*ref_max)[rh]));
      }
    }
    for (int c = 0; c < kVDim; ++c) {
      const size_t i = rh * kVDim + c;
      const double d = std::fabs(double{bf16_to_float(g.out[i])} - bf16_to_float(ref_out[i]));
      if (!(d <= b.out[i])) {
        fail("rh " + std::to_string(rh) + " c " + std::to_string(c) + ": out " +
             std::to_string(bf16_to_float(g.out[i])) + " vs ref " +
             std::to_string(bf16_to_float(ref_out[i])) + " (bound " + std::to_string(b.out[i]) +
             ")");
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " elements out of tolerance";
}

// ---------------------------------------------------------------------------------------------
// Decode
// ---------------------------------------------------------------------------------------------

// A DecodeCase mirrored on the device; run() poisons the outputs (and the workspace) first.
class GpuDecode {
 public:
  explicit GpuDecode(DecodeCase& c)
      : c_(c),
        pool_(dev(c.pool.bytes())),
        q_(dev(c.q)),
        idx_(dev(c.indices)),
        len_(dev(c.topk_len)),
        out_(dev_alloc<bf16>(c.out.size())),
        lse_(dev_alloc<float>(c.lse.size())) {}

  // Re-uploads the index list and lengths after a test edits them.
  void refresh() {
    EXPECT_TRUE(idx_.upload(c_.indices).ok());
    EXPECT_TRUE(len_.upload(c_.topk_len).ok());
  }

  SparseMlaDecodeParams params(int32_t num_splits, int64_t workspace_floats) {
    if (int64_t(ws_.size()) < workspace_floats) ws_ = dev_alloc<float>(size_t(workspace_floats));
    SparseMlaDecodeParams p = c_.params();
    p.q = q_.data(), p.cache.data = pool_.data(), p.indices = idx_.data();
    p.topk_len = c_.pass_topk_len ? len_.data() : nullptr;
    p.out = out_.data(), p.lse = lse_.data();
    p.num_splits = num_splits;
    p.split_workspace = workspace_floats > 0 ? ws_.data() : nullptr;
    p.split_workspace_floats = workspace_floats;
    return p;
  }

  Status run(int32_t num_splits, int64_t workspace_floats, GpuOut* result) {
    SparseMlaDecodeParams p = params(num_splits, workspace_floats);
    DSA_RETURN_IF_ERROR(out_.fill_bytes(testing::kPoisonByte));  // NaN
    DSA_RETURN_IF_ERROR(lse_.fill_bytes(testing::kPoisonByte));
    if (ws_.size()) DSA_RETURN_IF_ERROR(ws_.fill_bytes(testing::kPoisonByte));
    DSA_RETURN_IF_ERROR(sparse_mla_decode_cuda(p));
    DSA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    result->out = testing::host(out_);
    result->lse = testing::host(lse_);
    return ok_status();
  }

 private:
  DecodeCase& c_;
  DeviceBuffer<uint8_t> pool_;
  DeviceBuffer<bf16> q_;
  DeviceBuffer<int32_t> idx_, len_;
  DeviceBuffer<bf16> out_;
  DeviceBuffer<float> lse_;
  DeviceBuffer<float> ws_;
};

// The index patterns of the edge cases, one per row (cycling): full random lists, -1
// interleaved, topk_len < K with valid slots after it, topk_len = 0, all -1, one key somewhere,
// topk_len = 1, random length with -1s. Slots are drawn from pages [1, num_pages) in random order.
void fill_edge_rows(DecodeCase& c, Rng& rng) {
  const int32_t num_slots = c.pool.pool().num_pages * kPageSize;
  auto slot = [&] { return int32_t(rng.randint(kPageSize, num_slots - 1)); };
  for (int32_t r = 0; r < c.rows; ++r) {
    int32_t* idx = c.row_indices(r);
    std::fill(idx, idx + c.topk, -1);
    c.topk_len[r] = c.topk;
    switch (r % 8) {
      case 0: {  // distinct slots when the pool has enough, in random order
        std::vector<int32_t> perm = rng.permutation(kPageSize, num_slots);
        for (int32_t i = 0; i < c.topk; ++i) idx[i] = perm[i % perm.size()];
        break;
      }
      case 1:
        for (int32_t i = 0; i < c.topk; ++i) idx[i] = rng.randint(0, 2) == 0 ? -1 : slot();
        break;
      case 2:
        for (int32_t i = 0; i < c.topk; ++i) idx[i] = slot();
        c.topk_len[r] = int32_t(rng.randint(1, c.topk - 1));
        break;
      case 3:
        for (int32_t i = 0; i < c.topk; ++i) idx[i] = slot();
        c.topk_len[r] = 0;
        break;
      case 4:
        break;  // all -1
      case 5:
        idx[rng.randint(0, c.topk - 1)] = slot();
        break;
      case 6:
        for (int32_t i = 0; i < c.topk; ++i) idx[i] = slot();
        c.topk_len[r] = 1;
        break;
      default:
        for (int32_t i = 0; i < c.topk; ++i) idx[i] = rng.randint(0, 3) == 0 ? -1 : slot();
        c.topk_len[r] = int32_t(rng.randint(1, c.topk));
        break;
    }
  }
}

// Runs the reference (bounds), then the GPU non-split, auto-split and forced-split paths, each
// twice (bit-identical), each within tolerance.
void check_decode_paths(DecodeCase& c, const std::string& label,
                        const std::vector<int32_t>& forced_splits) {
  auto bounds = sparse_mla_decode_bounds(c.params());
  ASSERT_TRUE(bounds.ok()) << bounds.status().to_string();
  const std::vector<bf16> ref_out = c.out;
  const std::vector<float> ref_lse = c.lse;
  GpuDecode g(c);
  struct Path {
    int32_t splits;
    int64_t ws;
  };
  // Auto: room for what the launcher may pick on a 132-SM part (it never exceeds SMs / CTAs).
  const int32_t ctas = c.rows * ((c.heads + 63) / 64);
  const int32_t auto_room = std::clamp(264 / ctas, 1, kMaxSparseMlaSplits);
  std::vector<Path> paths = {{1, 0},  // never split
                             {0, sparse_mla_decode_workspace_floats(c.rows, c.heads, auto_room)}};
  for (int32_t s : forced_splits)
    paths.push_back({s, sparse_mla_decode_workspace_floats(c.rows, c.heads, s)});
  for (const Path& path : paths) {
    const std::string what = label + " splits=" + std::to_string(path.splits);
    GpuOut a, b;
    Status s = g.run(path.splits, path.ws, &a);
    ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
    expect_within(what, *bounds, ref_out, ref_lse, a);
    s = g.run(path.splits, path.ws, &b);
    ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
    EXPECT_TRUE(same_bits(a, b)) << what << ": two runs differ";
  }
}

TEST(SparseMlaDecodeCuda, SmallShapesBothFormatsAllHeadCounts) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (LatentFormat f : {LatentFormat::kBf16, LatentFormat::kFp8_656}) {
    for (int32_t heads : {16, 32, 64, 128}) {
      for (int32_t topk : {64, 192}) {
        Rng rng(seed + heads * 7 + topk + int(f));
        DecodeCase c(6, f, 9, heads, topk, rng);
        fill_edge_rows(c, rng);
        const std::string label = "fmt " + std::to_string(int(f)) + " H " + std::to_string(heads) +
                                  " K " + std::to_string(topk);
        check_decode_paths(c, label, {2, 5});
      }
    }
  }
}

// A peaky softmax (sm_scale 1: scores spread by ~10) and the tiny scale, no topk_len array.
TEST(SparseMlaDecodeCuda, ScalesAndNoTopkLen) {
  DSA_SKIP_WITHOUT_GPU();
  for (float scale : {1.0f, 1e-3f, kV32SmScale}) {
    for (bool pass_len : {false, true}) {
      Rng rng(testing::test_seed() + int(scale * 1000) + pass_len);
      DecodeCase c(8, LatentFormat::kFp8_656, 6, 64, 256, rng);
      fill_edge_rows(c, rng);
      c.sm_scale = scale, c.pass_topk_len = pass_len;
      check_decode_paths(c, "scale " + std::to_string(scale) + " len " + std::to_string(pass_len),
                         {3});
    }
  }
}

// V3.2 shapes: H 128, K 2048; a full row of distinct slots, -1 interleaved with topk_len < K,
// a single key, an empty row, on both cache formats.
TEST(SparseMlaDecodeCuda, V32ShapesBothFormats) {
  DSA_SKIP_WITHOUT_GPU();
  for (LatentFormat f : {LatentFormat::kFp8_656, LatentFormat::kBf16}) {
    Rng rng(testing::test_seed() + int(f));
    DecodeCase c(40, f, 4, 128, 2048, rng);
    const int32_t num_slots = 40 * kPageSize;
    std::vector<int32_t> perm = rng.permutation(kPageSize, num_slots);
    std::copy(perm.begin(), perm.begin() + 2048, c.row_indices(0));
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    for (int32_t i = 0; i < 2048; ++i) c.row_indices(1)[i] = i % 3 == 1 ? -1 : perm[i];
    c.topk_len[1] = 1500;
    c.row_indices(2)[777] = perm[5];
    c.topk_len[3] = 0;
    std::copy(perm.begin(), perm.begin() + 2048, c.row_indices(3));
    check_decode_paths(c, "V3.2 fmt " + std::to_string(int(f)), {4, 32});
    // Two rows (a batch-1 decode with one draft): the launcher's own split at up to 2 rows (2 key
    // tiles a split: 16 splits on a 132-SM part).
    DecodeCase two(40, f, 2, 128, 2048, rng);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    std::copy(perm.begin(), perm.begin() + 2048, two.row_indices(0));
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    std::copy(perm.begin(), perm.begin() + 2048, two.row_indices(1));
    two.topk_len[1] = 1999;
    check_decode_paths(two, "V3.2 2 rows fmt " + std::to_string(int(f)), {16});
  }
}

// Scales a FP8-656 slot's four tile scales by 2^e (still powers of two): the dequantised row
// grows or shrinks exactly, and the reference reads the same bytes.
void scale_fp8_slot(DecodeCase& c, int32_t slot, int e) {
  uint8_t* row = c.pool.bytes().data() + int64_t{slot} * kFp8LatentBytes;
  for (int tile = 0; tile < 4; ++tile) {
    float scale;
    std::memcpy(&scale, row + kLatentDim + 4 * tile, 4);
    scale = std::ldexp(scale, e);
    std::memcpy(row + kLatentDim + 4 * tile, &scale, 4);
  }
}

// The rows of one MTP request select the same keys (another order, duplicates within a row),
// next to rows with K, K - 1, 1 and 0 valid slots and -1 scattered; FP8 slots with extreme
// power-of-two scales; every split count from 1 to past the row's tile count.
TEST(SparseMlaDecodeCuda, SharedSelectionsValidCountsExtremeScalesEverySplit) {
  DSA_SKIP_WITHOUT_GPU();
  for (LatentFormat f : {LatentFormat::kFp8_656, LatentFormat::kBf16}) {
    Rng rng(testing::test_seed() + 31 + int(f));
    const int32_t num_pages = 12, topk = 256;
    DecodeCase c(num_pages, f, 8, 128, topk, rng);
    std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
    perm.resize(topk);
    if (f == LatentFormat::kFp8_656) {
      for (int32_t i = 0; i < 16; ++i) scale_fp8_slot(c, perm[i], i % 2 == 0 ? 16 : -40);
    }
    std::vector<int32_t> shuffled = perm;
    std::copy(perm.begin(), perm.end(), c.row_indices(0));  // K valid
    std::copy(perm.begin(), perm.end(), c.row_indices(1));  // K - 1 valid
    c.row_indices(1)[rng.randint(0, topk - 1)] = -1;
    c.row_indices(2)[rng.randint(0, topk - 1)] = perm[7];  // 1 valid
    // row 3: 0 valid (all -1, topk_len K)
    std::shuffle(shuffled.begin(), shuffled.end(), rng.engine());
    std::copy(shuffled.begin(), shuffled.end(), c.row_indices(4));         // row 0's set, reordered
    for (int32_t i = 0; i < topk; ++i) c.row_indices(5)[i] = perm[i / 2];  // duplicates
    for (int32_t i = 0; i < topk; ++i) c.row_indices(6)[i] = rng.randint(0, 1) ? -1 : perm[i];
    std::copy(perm.begin(), perm.end(), c.row_indices(7));
    c.topk_len[7] = topk - 1;
    check_decode_paths(c, "shared fmt " + std::to_string(int(f)), {2, 3, 4, 5, 8});
  }
}

// Sets a FP8-656 slot's four tile scales to `scale`.
void set_fp8_scales(DecodeCase& c, int32_t slot, float scale) {
  uint8_t* row = c.pool.bytes().data() + int64_t{slot} * kFp8LatentBytes;
  for (int tile = 0; tile < 4; ++tile) std::memcpy(row + kLatentDim + 4 * tile, &scale, 4);
}

// The FP8 dequantisation's edges: large scales (2^7, 2^8, 2^100), products in bf16's subnormal
// range (2^-126 * e4m3 subnormals), a zero scale, scales that are not powers of two; e4m3
// subnormal, zero and +-448 bytes written explicitly.
// H 64 and H 128 (one head block and two).
TEST(SparseMlaDecodeCuda, Fp8DequantPathsEdgeScalesAndBytes) {
  DSA_SKIP_WITHOUT_GPU();
  for (int32_t heads : {64, 128}) {
    Rng rng(testing::test_seed() + 57 + heads);
    const int32_t num_pages = 8, topk = 192;
    DecodeCase c(num_pages, LatentFormat::kFp8_656, 6, heads, topk, rng);
    std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
    const float scales[] = {0x1p7f, 0x1p8f, 0x1p100f, 0x1p-126f, 0.f, 1.5f, 3 * 0x1p-10f, 0x1p-3f};
    for (int32_t i = 0; i < 64; ++i) set_fp8_scales(c, perm[i], scales[i % 8]);
    const uint8_t edge_bytes[] = {0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x7E, 0xFE, 0x3F};
    for (int32_t i = 64; i < 96; ++i) {
      uint8_t* row = c.pool.bytes().data() + int64_t{perm[i]} * kFp8LatentBytes;
      for (int v = 0; v < kLatentDim; ++v) {
        if (rng.randint(0, 1) == 0) row[v] = edge_bytes[rng.randint(0, 9)];
      }
      set_fp8_scales(c, perm[i], scales[i % 8]);
    }
    for (int32_t r = 0; r < c.rows; ++r) {
      for (int32_t i = 0; i < topk; ++i) c.row_indices(r)[i] = perm[(i + 17 * r) % 128];
    }
    check_decode_paths(c, "fp8 edges H " + std::to_string(heads), {2});
  }
}

// A NaN byte (0x7F, 0xFF) dequantises to NaN (SPEC.md §1.1, §2.4), so every output and lse of a
// row that attends it is NaN (not the empty row's +0 / +inf, which the l > 0 test used to give);
// a row that does not attend it gets the same bits as without the NaN.
TEST(SparseMlaDecodeCuda, Fp8NanBytePropagatesToItsRowsOnly) {
  DSA_SKIP_WITHOUT_GPU();
  for (int32_t heads : {64, 128}) {  // one head block and two
    Rng rng(testing::test_seed() + 59 + heads);
    const int32_t num_pages = 6, topk = 128;  // pages 1..5: 320 slots for two rows' 256 keys
    DecodeCase c(num_pages, LatentFormat::kFp8_656, 2, heads, topk, rng);
    std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
    for (int32_t i = 0; i < topk; ++i) c.row_indices(0)[i] = perm[i];
    for (int32_t i = 0; i < topk; ++i) c.row_indices(1)[i] = perm[topk + i];
    const size_t row_elems = size_t(c.heads) * kVDim;
    for (int32_t splits : {1, 2}) {  // the kernel's own epilogue, and the split combine
      const int64_t ws =
          splits > 1 ? sparse_mla_decode_workspace_floats(c.rows, c.heads, splits) : 0;
      for (uint8_t nan_byte : {uint8_t{0x7F}, uint8_t{0xFF}}) {
        GpuOut clean, with_nan;
        {
          GpuDecode g(c);
          const Status st = g.run(splits, ws, &clean);
          ASSERT_TRUE(st.ok()) << st.to_string();
        }
        std::vector<uint8_t> saved = c.pool.bytes();
        c.pool.bytes()[int64_t{perm[5]} * kFp8LatentBytes + 300] = nan_byte;  // row 0's 6th key
        {
          GpuDecode g(c);
          const Status st = g.run(splits, ws, &with_nan);
          ASSERT_TRUE(st.ok()) << st.to_string();
        }
        c.pool.bytes() = saved;
        for (size_t i = 0; i < row_elems; ++i) {
          ASSERT_TRUE(std::isnan(bf16_to_float(with_nan.out[i])))
              << "splits " << splits << " byte " << int(nan_byte) << " element " << i;
        }
        for (int32_t h = 0; h < c.heads; ++h) EXPECT_TRUE(std::isnan(with_nan.lse[size_t(h)]));
        for (size_t i = row_elems; i < 2 * row_elems; ++i) {
          ASSERT_EQ(with_nan.out[i].bits, clean.out[i].bits) << "element " << i;
        }
      }
    }
  }
}

// A row's head blocks are independent: H 128 (two CTAs per row, which read the same keys) gives
// the same bits as each block of 64 heads run alone, for every split count. (A 2-CTA-cluster form
// that shared each tile's dequantisation between the two was measured slower: bench/RESULTS.md.)
TEST(SparseMlaDecodeCuda, Fp8HeadBlocksEqualEachBlockAlone) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 61);
  const int32_t rows = 8, topk = 320;
  DecodeCase both(12, LatentFormat::kFp8_656, rows, 128, topk, rng);
  fill_edge_rows(both, rng);
  for (int32_t i = 0; i < 16; ++i) scale_fp8_slot(both, kPageSize + 3 * i, i % 2 == 0 ? 16 : -40);
  DecodeCase half(12, LatentFormat::kFp8_656, rows, 64, topk, rng);
  half.pool.bytes() = both.pool.bytes();
  half.indices = both.indices, half.topk_len = both.topk_len;
  const size_t head_block = size_t(64) * kQkDim, out_block = size_t(64) * kVDim;
  for (int32_t splits : {1, 2, 5}) {
    const int64_t ws = splits > 1 ? sparse_mla_decode_workspace_floats(rows, 128, splits) : 0;
    GpuOut full;
    {
      GpuDecode g(both);
      const Status st = g.run(splits, ws, &full);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    for (int32_t hb = 0; hb < 2; ++hb) {
      for (int32_t r = 0; r < rows; ++r) {
        std::copy_n(both.q.begin() + (size_t(r) * 2 + hb) * head_block, head_block,
                    half.q.begin() + size_t(r) * head_block);
      }
      GpuOut alone;
      GpuDecode g(half);
      const Status st = g.run(splits, ws, &alone);
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (int32_t r = 0; r < rows; ++r) {
        const std::string what = "splits " + std::to_string(splits) + " head block " +
                                 std::to_string(hb) + " row " + std::to_string(r);
        ASSERT_EQ(0,
                  std::memcmp(full.out.data() + (size_t(r) * 2 + hb) * out_block,
                              alone.out.data() + size_t(r) * out_block, out_block * sizeof(bf16)))
            << what;
        ASSERT_EQ(0, std::memcmp(full.lse.data() + (size_t(r) * 2 + hb) * 64,
                                 alone.lse.data() + size_t(r) * 64, 64 * sizeof(float)))
            << what;
      }
    }
  }
}

// Rows >= SMs / 2: the auto path does not split; results still match.
TEST(SparseMlaDecodeCuda, ManyRowsNoSplit) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  DecodeCase c(10, LatentFormat::kFp8_656, 160, 128, 128, rng);
  fill_edge_rows(c, rng);
  check_decode_paths(c, "160 rows", {});
}

// Checked mode: an attended index outside [P, num_pages P) (page 0, past the pool, negative
// other than -1) or topk_len outside [0, K] is OutOfRange; the word is cleared afterwards, and
// bad values past topk_len are not looked at.
TEST(SparseMlaDecodeCuda, CheckedModeReportsOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  for (LatentFormat f : {LatentFormat::kBf16, LatentFormat::kFp8_656}) {
    Rng rng(testing::test_seed());
    DecodeCase c(4, f, 3, 16, 128, rng);
    fill_edge_rows(c, rng);
    GpuDecode g(c);
    GpuOut out;
    for (int32_t splits : {1, 3}) {
      const int64_t ws = sparse_mla_decode_workspace_floats(c.rows, c.heads, 3);
      ASSERT_TRUE(g.run(splits, ws, &out).ok());
      for (int32_t bad : {5, 0, 4 * kPageSize, 1 << 30, -7}) {
        const int32_t saved = c.row_indices(1)[10];
        c.row_indices(1)[10] = bad;
        c.topk_len[1] = c.topk;
        g.refresh();
        Status s = g.run(splits, ws, &out);
        EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << "index " << bad << ": " << s.to_string();
        c.row_indices(1)[10] = saved;
        g.refresh();
        EXPECT_TRUE(g.run(splits, ws, &out).ok()) << "error word not cleared";
      }
      for (int32_t bad_len : {-1, c.topk + 1}) {
        c.topk_len[2] = bad_len;
        g.refresh();
        Status s = g.run(splits, ws, &out);
        EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << "topk_len " << bad_len;
        c.topk_len[2] = 1;
      }
      // Past topk_len nothing is checked.
      c.topk_len[2] = 1;
      c.row_indices(2)[50] = 3;
      g.refresh();
      Status s = g.run(splits, ws, &out);
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
  }
}

// Unchecked mode: bad indices are treated as -1 and topk_len is clamped, as the reference does.
TEST(SparseMlaDecodeCuda, UncheckedModeNeutralises) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  for (LatentFormat f : {LatentFormat::kBf16, LatentFormat::kFp8_656}) {
    Rng rng(testing::test_seed() + 3);
    DecodeCase c(4, f, 6, 32, 128, rng);
    fill_edge_rows(c, rng);
    c.row_indices(0)[3] = 5, c.row_indices(0)[7] = 4 * kPageSize, c.row_indices(0)[9] = -100;
    c.row_indices(1)[0] = INT32_MAX, c.row_indices(1)[1] = INT32_MIN;
    c.topk_len[2] = c.topk + 1000;
    c.topk_len[3] = -5;
    c.row_indices(4)[0] = 0;  // the only listed index: page 0, so the row is empty
    c.topk_len[4] = 1;
    check_decode_paths(c, "unchecked fmt " + std::to_string(int(f)), {4});
  }
}

TEST(SparseMlaDecodeCuda, HostValidation) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  DecodeCase c(2, LatentFormat::kBf16, 2, 16, 64, rng);
  GpuDecode g(c);
  SparseMlaDecodeParams p = g.params(1, 0);
  EXPECT_TRUE(sparse_mla_decode_cuda(p).ok());
  constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
  testing::expect_rejects(
      p, sparse_mla_decode_cuda,
      {{"H 48", [](auto& q) { q.num_heads = 48; }, kInvalid},
       {"K 100", [](auto& q) { q.topk = 100; }, kInvalid},
       {"sm_scale 0", [](auto& q) { q.sm_scale = 0.f; }, kInvalid},
       {"num_splits 65", [](auto& q) { q.num_splits = kMaxSparseMlaSplits + 1; }, kInvalid},
       {"splits without workspace", [](auto& q) { q.num_splits = 2; }, kInvalid},
       {"workspace too small",
        [&](auto& q) { q = g.params(2, sparse_mla_decode_workspace_floats(2, 16, 2) - 1); },
        kInvalid},
       {"misaligned q",
        [](auto& q) {
          q.q = reinterpret_cast<const bf16*>(reinterpret_cast<const uint8_t*>(q.q) + 2);
        },
        kInvalid},
       {"misaligned out", [](auto& q) { q.out += 1; }, kInvalid},
       {"R = 0 is a no-op",
        [](auto& q) {
          q.rows = 0, q.q = nullptr, q.indices = nullptr, q.out = nullptr;
          q.lse = nullptr;
        },
        StatusCode::kOk}});
}

// ---------------------------------------------------------------------------------------------
// Prefill
// ---------------------------------------------------------------------------------------------

// T new tokens after `cached` tokens of one request in a randomly paged bf16 pool; token t sees
// [0, cached + t]: all of them in order when that is <= K, else a random K-subset, shuffled, with
// some entries replaced by -1. Source 2 = the rows gathered in position order (§3h).
struct PrefillCase {
  testing::LatentPoolBuffer pool;
  int32_t tokens, heads, topk, kv_len;
  std::vector<int32_t> slot_of;
  std::vector<bf16> gathered, q;
  std::vector<int32_t> local, global, topk_len;

  PrefillCase(int32_t cached, int32_t tokens_, int32_t heads_, int32_t topk_, Rng& rng)
      : pool(2 + (cached + tokens_ + 63) / 64, LatentFormat::kBf16),
        tokens(tokens_),
        heads(heads_),
        topk(topk_),
        kv_len(cached + tokens_) {
    pool.fill_random(rng);
    std::vector<int32_t> pages = rng.permutation(1, pool.pool().num_pages);
    for (int32_t p = 0; p < kv_len; ++p) {
      slot_of.push_back(pages[p / kPageSize] * kPageSize + p % kPageSize);
      const bf16* row =
          reinterpret_cast<const bf16*>(pool.bytes().data()) + size_t(slot_of[p]) * kQkDim;
      gathered.insert(gathered.end(), row, row + kQkDim);
    }
    q = rng.bf16_vector(size_t(tokens) * heads * kQkDim, 0.5f);
    for (int32_t t = 0; t < tokens; ++t) {
      const int32_t row_len = cached + t + 1;
      std::vector<int32_t> pos;
      if (row_len <= topk) {
        for (int32_t i = 0; i < row_len; ++i) pos.push_back(i);
      } else {
        pos = rng.permutation(0, row_len);
        pos.resize(topk);
        for (auto& i : pos) i = rng.randint(0, 9) == 0 ? -1 : i;
      }
      topk_len.push_back(t == 1 ? 0 : int32_t(pos.size()));  // token 1: an empty row
      pos.resize(topk, -1);
      for (int32_t i : pos) {
        local.push_back(i);
        global.push_back(i < 0 ? -1 : slot_of[i]);
      }
    }
  }
  SparseMlaPrefillParams source2(bf16* out, float* lse, float* max_logit) {
    SparseMlaPrefillParams p;
    p.q = q.data(), p.kv = gathered.data(), p.num_kv = kv_len;
    p.kv_source = SparseMlaKvSource::kGathered, p.indices = local.data();
    p.topk_len = topk_len.data(), p.tokens = tokens, p.num_heads = heads, p.topk = topk;
    p.sm_scale = kV32SmScale, p.out = out, p.lse = lse, p.max_logit = max_logit;
    return p;
  }
  SparseMlaPrefillParams source1(bf16* out, float* lse, float* max_logit) {
    SparseMlaPrefillParams p = source2(out, lse, max_logit);
    p.kv = reinterpret_cast<const bf16*>(pool.bytes().data());
    p.num_kv = pool.pool().num_pages * kPageSize;
    p.kv_source = SparseMlaKvSource::kFlatPool, p.indices = global.data();
    return p;
  }
};

// The same case on the device, for one source.
struct GpuPrefill {
  DeviceBuffer<bf16> q, kv, out;
  DeviceBuffer<int32_t> idx, len;
  DeviceBuffer<float> lse, max_logit;
  SparseMlaPrefillParams p;

  GpuPrefill(const SparseMlaPrefillParams& host, size_t kv_elems)
      : q(dev(std::vector<bf16>(host.q, host.q + size_t(host.tokens) * host.num_heads * kQkDim))),
        kv(dev(std::vector<bf16>(host.kv, host.kv + kv_elems))),
        out(dev_alloc<bf16>(size_t(host.tokens) * host.num_heads * kVDim)),
        idx(dev(
            std::vector<int32_t>(host.indices, host.indices + size_t(host.tokens) * host.topk))),
        len(dev(std::vector<int32_t>(host.topk_len, host.topk_len + host.tokens))),
        lse(dev_alloc<float>(size_t(host.tokens) * host.num_heads)),
        max_logit(dev_alloc<float>(size_t(host.tokens) * host.num_heads)) {
    p = host;
    p.q = q.data(), p.kv = kv.data(), p.indices = idx.data(), p.topk_len = len.data();
    p.out = out.data(), p.lse = lse.data(), p.max_logit = max_logit.data();
  }
  Status run(GpuOut* r) {
    DSA_RETURN_IF_ERROR(out.fill_bytes(testing::kPoisonByte));
    DSA_RETURN_IF_ERROR(lse.fill_bytes(testing::kPoisonByte));
    DSA_RETURN_IF_ERROR(max_logit.fill_bytes(testing::kPoisonByte));
    DSA_RETURN_IF_ERROR(sparse_mla_prefill_cuda(p));
    DSA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    r->out = testing::host(out), r->lse = testing::host(lse),
    r->max_logit = testing::host(max_logit);
    return ok_status();
  }
};

void check_prefill(int32_t cached, int32_t tokens, int32_t heads, int32_t topk, uint64_t seed) {
  Rng rng(seed);
  PrefillCase c(cached, tokens, heads, topk, rng);
  const size_t n_rh = size_t(tokens) * heads;
  std::vector<bf16> ref_out(n_rh * kVDim);
  std::vector<float> ref_lse(n_rh), ref_max(n_rh);
  auto bounds =
      sparse_mla_prefill_bounds(c.source2(ref_out.data(), ref_lse.data(), ref_max.data()));
  ASSERT_TRUE(bounds.ok()) << bounds.status().to_string();
  const std::string label = "prefill H " + std::to_string(heads) + " K " + std::to_string(topk);

  GpuPrefill s2(c.source2(nullptr, nullptr, nullptr), c.gathered.size());
  GpuPrefill s1(c.source1(nullptr, nullptr, nullptr), c.pool.bytes().size() / 2);
  GpuOut a, b, d;
  Status s = s2.run(&a);
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_within(label + " source 2", *bounds, ref_out, ref_lse, a, &ref_max);
  ASSERT_TRUE(s2.run(&b).ok());
  EXPECT_TRUE(same_bits(a, b)) << label << ": two runs differ";
  s = s1.run(&d);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(same_bits(a, d)) << label << ": source 1 (flat pool) and source 2 differ";
}

TEST(SparseMlaPrefillCuda, SmallShapes) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  check_prefill(60, 8, 16, 64, seed);  // rows shorter and longer than K
  check_prefill(100, 6, 32, 128, seed + 1);
  check_prefill(0, 5, 64, 64, seed + 2);  // causal from the first token
}

TEST(SparseMlaPrefillCuda, V32Shape) {
  DSA_SKIP_WITHOUT_GPU();
  check_prefill(2500, 3, 128, 2048, testing::test_seed());
  check_prefill(1000, 3, 128, 2048, testing::test_seed() + 1);  // row_len < K: in-order lists
}

TEST(SparseMlaPrefillCuda, CheckedModeReportsOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed());
  PrefillCase c(70, 4, 16, 64, rng);
  GpuOut out;
  {
    c.local[3] = c.kv_len;  // token 0 attends 64 entries: entry 3 is past S_kv
    GpuPrefill g(c.source2(nullptr, nullptr, nullptr), c.gathered.size());
    Status s = g.run(&out);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  }
  {
    c.global[3] = 10;  // page 0 of the flat pool
    GpuPrefill g(c.source1(nullptr, nullptr, nullptr), c.pool.bytes().size() / 2);
    Status s = g.run(&out);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  }
  {
    ScopedCheckedMode unchecked(false);  // the same lists, neutralised
    const size_t n_rh = size_t(c.tokens) * c.heads;
    std::vector<bf16> ref_out(n_rh * kVDim);
    std::vector<float> ref_lse(n_rh), ref_max(n_rh);
    auto bounds =
        sparse_mla_prefill_bounds(c.source2(ref_out.data(), ref_lse.data(), ref_max.data()));
    ASSERT_TRUE(bounds.ok());
    GpuPrefill g(c.source2(nullptr, nullptr, nullptr), c.gathered.size());
    ASSERT_TRUE(g.run(&out).ok());
    expect_within("prefill unchecked", *bounds, ref_out, ref_lse, out, &ref_max);
  }
}

}  // namespace
}  // namespace dsa::kernels
