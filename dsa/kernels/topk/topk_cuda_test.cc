// GPU tests of topk_cuda (SPEC.md §3e; bug classes 2, 9 and 13 of §9). Class E: every idx row is
// compared with topk_ref's as a set (the trivial rows, len <= K, entry by entry), the -1 tail
// exactly, and idx rows that are not written must keep their poison. Every case runs twice and
// must be bit-identical; the multi-path cases also across cluster sizes and chunk sizes of the
// one-pass kernel, and across the single-CTA and cluster variants of the streaming kernel.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/kernels/topk/topk_check.h"
#include "dsa/kernels/topk/topk_cuda_launch.h"
#include "dsa/kernels/topk/topk_test_case.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using namespace topk_test;
using testing::Rng;

constexpr int32_t kNever = INT32_MAX;  // long_row_min_len that keeps every row on one CTA
constexpr int32_t kStream = 512;       // a max_chunk that sends any ld > 4093 to the stream path

struct GpuOptions {
  int32_t max_chunk = kTopkMaxChunk;
  int32_t cluster_size = 0;
  int32_t long_row_min_len = 65536;
  // The tests choose the path by length alone (every row count may take clusters), so each keeps
  // the coverage it was written for; the row-count rule has its own test.
  int32_t cluster_max_rows = kNever;
  const TopkPlanHeader* plan = nullptr;             // host copy; uploaded
  std::function<void(TopkParams&)> edit = nullptr;  // applied to the device params last
};

struct GpuRun {
  Status op;                 // what topk_cuda returned
  std::vector<int32_t> idx;  // idx after the call (uploaded from the case's poisoned idx)
};

using testing::to_device;

template <typename T>
T* or_null(const DeviceBuffer<T>& b) {
  return b.size() > 0 ? b.data() : nullptr;
}

// Device copies of the case's inputs, one topk_cuda call, the idx downloaded.
StatusOr<GpuRun> run_gpu(const TopkCase& c, const GpuOptions& opt = {}) {
  std::vector<int32_t> table_host;
  if (c.page_table.data != nullptr) {
    table_host.assign(c.page_table.data,
                      c.page_table.data + size_t(c.page_table.num_rows) * c.page_table.width);
  }
  std::vector<TopkPlanHeader> plan_host;
  if (opt.plan != nullptr) plan_host.push_back(*opt.plan);
  DSA_ASSIGN_OR_RETURN(auto logits, to_device(c.logits));
  DSA_ASSIGN_OR_RETURN(auto len, to_device(c.len));
  DSA_ASSIGN_OR_RETURN(auto col_base, to_device(c.col_base));
  DSA_ASSIGN_OR_RETURN(auto out_row, to_device(c.out_row));
  DSA_ASSIGN_OR_RETURN(auto offset, to_device(c.offset));
  DSA_ASSIGN_OR_RETURN(auto row_page, to_device(c.row_page));
  DSA_ASSIGN_OR_RETURN(auto table, to_device(table_host));
  DSA_ASSIGN_OR_RETURN(auto plan, to_device(plan_host));
  DSA_ASSIGN_OR_RETURN(auto idx, to_device(c.idx));

  TopkParams p;
  p.logits = or_null(logits);
  p.logits_ld = c.ld;
  p.rows = c.rows();
  p.len = or_null(len);
  p.col_base = or_null(col_base);
  p.k = c.k;
  p.variant = c.variant;
  p.page_table = c.page_table;
  p.page_table.data = or_null(table);
  p.row_page = or_null(row_page);
  p.offset = or_null(offset);
  p.out_row = or_null(out_row);
  p.out_rows = c.out_rows();
  p.idx = or_null(idx);
  p.plan = or_null(plan);
  p.max_chunk = opt.max_chunk;
  p.cluster_size = opt.cluster_size;
  p.long_row_min_len = opt.long_row_min_len;
  p.cluster_max_rows = opt.cluster_max_rows;
  if (opt.edit) opt.edit(p);

  GpuRun run;
  run.op = topk_cuda(p);
  DSA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  DSA_ASSIGN_OR_RETURN(run.idx, idx.download());
  return run;
}

// Per idx row, the neutralised length of the input row that writes it, -1 when none does (the
// reference's rules: out-of-range out_row dropped, the last of repeated out_rows wins, col_base
// clamped into [0, ld], len into [0, ld - col_base]).
std::vector<int64_t> written_lengths(const TopkCase& c) {
  std::vector<int64_t> w(size_t(c.out_rows()), -1);
  std::vector<bool> taken(size_t(c.out_rows()), false);
  for (int32_t r = c.rows() - 1; r >= 0; --r) {
    const int32_t o = c.out_row.empty() ? r : c.out_row[r];
    if (o < 0 || o >= c.out_rows() || taken[o]) continue;
    taken[o] = true;
    const int64_t base = std::clamp<int64_t>(c.col_base.empty() ? 0 : c.col_base[r], 0, c.ld);
    w[o] = std::clamp<int64_t>(c.len[r], 0, c.ld - base);
  }
  return w;
}

// got against the reference's idx: sets for the selected prefix, exact -1 tail, exact order for
// trivial rows, untouched poison for rows nobody writes.
void expect_same_as_ref(const std::vector<int32_t>& got, const std::vector<int32_t>& ref,
                        const TopkCase& c) {
  ASSERT_EQ(got.size(), ref.size());
  const std::vector<int64_t> lens = written_lengths(c);
  int failures = 0;
  for (int32_t o = 0; o < c.out_rows() && failures < 8; ++o) {
    const int32_t* g = got.data() + size_t(o) * c.k;
    const int32_t* f = ref.data() + size_t(o) * c.k;
    if (lens[o] < 0) {
      const bool same = std::equal(g, g + c.k, f);
      EXPECT_TRUE(same) << "idx row " << o << " is written by no row and must keep its contents";
      failures += same ? 0 : 1;
      continue;
    }
    const int32_t m = int32_t(std::min<int64_t>(lens[o], c.k));
    Status s = compare_topk_row(g, std::vector<int32_t>(f, f + m), c.k, o, lens[o] <= c.k);
    EXPECT_TRUE(s.ok()) << s.to_string() << " (len " << lens[o] << ", K " << c.k << ")";
    failures += s.ok() ? 0 : 1;
  }
}

// The reference once, the GPU twice (bit-identical), compared; the GPU idx in *out if asked.
void expect_gpu_matches_ref(const TopkCase& c, const GpuOptions& opt = {},
                            std::vector<int32_t>* out = nullptr) {
  TopkCase ref = c;
  Status rs = topk_ref(ref.params());
  ASSERT_TRUE(rs.ok()) << rs.to_string();
  StatusOr<GpuRun> first = run_gpu(c, opt);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(first->op.ok()) << first->op.to_string();
  StatusOr<GpuRun> second = run_gpu(c, opt);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  ASSERT_TRUE(second->op.ok()) << second->op.to_string();
  EXPECT_TRUE(first->idx == second->idx) << "two identical launches gave different idx";
  expect_same_as_ref(first->idx, ref.idx, c);
  if (out != nullptr) *out = first->idx;
}

void fill_normal(TopkCase& c, int32_t r, Rng& rng) {
  for (int32_t p = 0; p < c.len[r]; ++p) c.row(r)[p] = rng.normal();
}
void fill_hazard(TopkCase& c, int32_t r, Rng& rng) {
  for (int32_t p = 0; p < c.len[r]; ++p) c.row(r)[p] = hazard_value(rng);
}

class TopkCuda : public ::testing::Test {
 protected:
  void SetUp() override { DSA_SKIP_WITHOUT_GPU(); }
  ScopedCheckedMode checked_{true};
};

TEST_F(TopkCuda, HandComputedTinyRows) {
  TopkCase c(8, 68, 64);
  auto fill = [&](int32_t r, int32_t len, float v) {
    c.len[r] = len;
    std::fill_n(c.row(r), len, v);
  };
  fill(0, 67, 0.5f);
  c.row(0)[5] = -kInf;
  c.row(0)[9] = kNaN;
  c.row(0)[20] = -2.f;
  fill(1, 65, 7.f);  // all ties: the lowest 64 positions
  fill(2, 65, 1.f);  // -0 at 0 ties +0 at 64: the lower position wins
  c.row(2)[0] = -0.0f;
  c.row(2)[64] = 0.0f;
  fill(3, 65, 1.f);
  c.row(3)[0] = 0.0f;
  c.row(3)[64] = -0.0f;
  fill(4, 65, 1.f);  // NaN ranks below -inf
  c.row(4)[0] = kNaN;
  c.row(4)[64] = -kInf;
  fill(5, 65, 1.f);  // NaNs tie with each other
  c.row(5)[3] = kNaN;
  c.row(5)[60] = kNaN;
  fill(6, 3, -5.f);  // len <= K
  c.len[7] = 0;      // empty row
  expect_gpu_matches_ref(c);
}

TEST_F(TopkCuda, RandomRowsMatchReference) {
  Rng rng(testing::test_seed());
  for (int32_t k : {64, 192, 2048}) {
    const std::vector<int64_t> lens = {
        0, 1, k - 1, k, k + 1, rng.randint(0, k), rng.randint(k, 6000), 20000};
    TopkCase c(int32_t(lens.size()) * 2, 20000, k);
    for (int32_t r = 0; r < c.rows(); ++r) {
      c.len[r] = int32_t(lens[r % lens.size()]);
      if (r < int32_t(lens.size())) {
        fill_normal(c, r, rng);
      } else {
        fill_hazard(c, r, rng);
      }
    }
    SCOPED_TRACE(::testing::Message() << "K = " << k);
    expect_gpu_matches_ref(c);
  }
}

// The §3e field failures: ties overflowing any buffer, mostly -inf rows, NaN, -0/+0, and the
// length boundaries around K.
TEST_F(TopkCuda, EdgeRows) {
  Rng rng(testing::test_seed());
  const int32_t k = 2048, n = 5000;
  TopkCase c(13, n, k);
  const float equal_values[] = {3.f, kNaN, -kInf, kInf};
  for (int32_t r = 0; r < 4; ++r) {  // 5000 equal values: the K lowest positions
    c.len[r] = n;
    std::fill_n(c.row(r), n, equal_values[r]);
  }
  c.len[4] = n;  // 4000 -inf of 5000: every finite value, then the lowest -inf positions
  fill_normal(c, 4, rng);
  std::vector<int32_t> perm = rng.permutation(0, n);
  for (int32_t i = 0; i < 4000; ++i) c.row(4)[perm[i]] = -kInf;
  c.len[5] = n;  // -0 and +0 alternating: one tie class
  for (int32_t p = 0; p < n; ++p) c.row(5)[p] = p % 2 ? 0.0f : -0.0f;
  c.len[6] = n;  // NaN and -inf only: every -inf first
  for (int32_t p = 0; p < n; ++p) c.row(6)[p] = p % 3 == 0 ? -kInf : kNaN;
  c.len[7] = 0;
  c.len[8] = 1000;
  c.len[9] = k;
  c.len[10] = k + 1;
  c.len[11] = k - 1;
  c.len[12] = n;  // every hazard
  for (int32_t r = 8; r < 13; ++r) fill_hazard(c, r, rng);
  expect_gpu_matches_ref(c);
}

TEST_F(TopkCuda, NanRanksBelowMinusInf) {
  TopkCase c(2, 300, 64);
  c.len = {300, 300};
  for (int32_t p = 0; p < 300; ++p) c.row(0)[p] = p < 150 ? kNaN : -kInf;
  for (int32_t p = 0; p < 300; ++p) c.row(1)[p] = p % 6 == 5 ? -1e30f : kNaN;
  expect_gpu_matches_ref(c);
}

// Windows at every alignment (col_base mod 4 = 0..3), values outside the windows too.
TEST_F(TopkCuda, ColBaseShiftsTheWindow) {
  Rng rng(testing::test_seed());
  const int32_t ld = 8192;
  TopkCase c(10, ld, 128);
  c.col_base = {0, 1, 2, 3, 5, 100, 4097, 4098, ld - 300, ld};
  c.len = {150, 8191, 1000, 129, 128, 2096, 4095, 4094, 300, 0};
  for (auto& v : c.logits) v = hazard_value(rng);
  expect_gpu_matches_ref(c);
}

// Bug class 13: width 160K, lengths 0..200, each row's selection follows its own length; +inf
// past every length would win if read. One full-width row rides along.
TEST_F(TopkCuda, WideBufferShortLengthsFollowEachRow) {
  Rng rng(testing::test_seed());
  const int32_t ld = 163840, rows = 202;
  TopkCase c(rows, ld, 64);
  for (int32_t r = 0; r <= 200; ++r) {
    c.len[r] = r;
    fill_hazard(c, r, rng);
  }
  c.len[201] = ld;
  fill_normal(c, 201, rng);
  expect_gpu_matches_ref(c);
}

// Long rows (64K, 128K, 200K) with every kind of value, tie floods that overflow every CTA's
// candidate buffer, and misaligned windows, on the one-pass kernel (8-CTA clusters, the default
// here) and on the streaming kernel (one CTA per row, clusters from K + 1 on, its default
// threshold). Each kernel's variants agree bit for bit; all match the reference.
TEST_F(TopkCuda, LongRowsAcrossPaths) {
  Rng rng(testing::test_seed());
  const int32_t ld = 204800, k = 2048;
  TopkCase c(12, ld, k);
  const int32_t lens[] = {65536, 131072, 200000, 200000, 200000, 200000, 200000, 65535};
  for (int32_t r = 0; r < 8; ++r) c.len[r] = lens[r];
  for (int32_t r : {0, 1, 2, 7}) fill_normal(c, r, rng);
  fill_hazard(c, 3, rng);
  std::fill_n(c.row(4), 200000, 1.0f);  // all ties
  for (int32_t p = 0; p < 200000; ++p) c.row(5)[p] = std::round(rng.normal() * 4.f) / 4.f;
  for (int32_t p = 0; p < 200000; ++p) c.row(6)[p] = p % 200 == 7 ? rng.normal() : -kInf;
  c.col_base = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4097};
  for (int32_t r = 8; r < 12; ++r) {
    c.len[r] = ld - c.col_base[r];
    for (int32_t p = 0; p < ld; ++p) c.row(r)[p] = rng.normal();
  }
  std::vector<int32_t> one_pass, one_pass_small_chunks, by_default, single_cta, all_clusters;
  {
    SCOPED_TRACE("one pass, 8-CTA clusters");
    expect_gpu_matches_ref(c, {}, &one_pass);
  }
  {
    SCOPED_TRACE("one pass, 8-CTA clusters of the smallest chunks that hold ld");
    expect_gpu_matches_ref(c, {.max_chunk = 25728}, &one_pass_small_chunks);
  }
  {
    SCOPED_TRACE("stream, default threshold");
    expect_gpu_matches_ref(c, {.max_chunk = kStream}, &by_default);
  }
  {
    SCOPED_TRACE("stream, one CTA per row");
    expect_gpu_matches_ref(c, {.max_chunk = kStream, .long_row_min_len = kNever}, &single_cta);
  }
  {
    SCOPED_TRACE("stream, clusters from K + 1");
    expect_gpu_matches_ref(c, {.max_chunk = kStream, .long_row_min_len = k + 1}, &all_clusters);
  }
  EXPECT_TRUE(one_pass == one_pass_small_chunks) << "the one-pass output depends on the chunks";
  EXPECT_TRUE(by_default == single_cta) << "the cluster and single-CTA paths disagree";
  EXPECT_TRUE(by_default == all_clusters) << "the output depends on the threshold";
}

// The same agreement on medium rows: one CTA per row, and clusters of 2, 4 and 8 whose chunks
// are mostly empty for the shorter rows; the streaming kernel on one CTA and on clusters.
TEST_F(TopkCuda, MediumRowsOnClustersAgree) {
  Rng rng(testing::test_seed());
  TopkCase c(6, 20000, 256);
  c.len = {257, 300, 4100, 8193, 20000, 20000};
  for (int32_t r = 0; r < 4; ++r) fill_normal(c, r, rng);
  fill_hazard(c, 4, rng);
  std::fill_n(c.row(5), 20000, -0.0f);
  std::vector<int32_t> one_cta;
  expect_gpu_matches_ref(c, {.cluster_size = 1}, &one_cta);
  // The smallest chunk that holds ld on that many CTAs: rows up to it stay on one CTA.
  for (auto [cluster, chunk] : {std::pair{2, 10112}, {4, 5120}, {8, 2560}}) {
    SCOPED_TRACE(::testing::Message() << "one pass, clusters of " << cluster);
    std::vector<int32_t> got;
    expect_gpu_matches_ref(c, {.max_chunk = chunk, .cluster_size = cluster}, &got);
    EXPECT_TRUE(got == one_cta);
  }
  std::vector<int32_t> single_cta, clusters;
  expect_gpu_matches_ref(c, {.max_chunk = kStream, .long_row_min_len = kNever}, &single_cta);
  expect_gpu_matches_ref(c, {.max_chunk = kStream, .long_row_min_len = 257}, &clusters);
  EXPECT_TRUE(single_cta == clusters);
}

// Every way the candidates (the values in the K-th key's fp16 bin) are selected, on one CTA per
// row and on 8-CTA clusters, whose outputs must agree bit for bit and match the reference:
//   rows 0, 1  15000 distinct fp32 values in one fp16 bin: one CTA overflows its buffer and
//              re-reads them; a cluster buffers 1875 per CTA, too many to gather, and sums
//              its histograms;
//   row 2      an exact tie flood, overflowing every buffer;
//   row 10     1000 sure winners, then 1800 candidates (each value twice: ties at the threshold),
//              selected by radix passes over one CTA's or a cluster's gathered candidates;
//   others     few candidates, ranked directly; lengths around the 16 KB copy pieces and every
//              alignment of the window.
TEST_F(TopkCuda, OnePassCandidatePathsAndPieceEdges) {
  Rng rng(testing::test_seed());
  const int32_t ld = 40000;  // + 3 <= kTopkMaxChunk: one CTA holds a row
  TopkCase c(11, ld, 2048);
  c.len = {15000, 15000, 40000, 4097, 8191, 8193, 12288, 4095, 39999, 20000, 20000};
  c.col_base = {0, 1, 0, 0, 3, 2, 1, 0, 1, 20000, 3};
  for (int32_t r = 0; r < 11; ++r) {
    float* row = c.row(r) + c.col_base[r];
    if (r == 0 || r == 1) {  // distinct values in [1, 1 + 2^-8): one fp16 bin
      std::vector<int32_t> perm = rng.permutation(0, 15000);
      for (int32_t p = 0; p < 15000; ++p) row[p] = 1.0f + float(perm[p]) * 0x1p-22f;
    } else if (r == 2) {
      std::fill_n(row, 40000, 0.75f);  // all ties
    } else if (r == 10) {
      for (int32_t p = 0; p < 20000; ++p) {
        row[p] = p < 1000   ? 5.0f + float(p) * 1e-3f
                 : p < 2800 ? 1.0f + float((p - 1000) % 900) * 0x1p-22f
                            : -1.0f - float(p) * 1e-6f;
      }
    } else {
      for (int32_t p = 0; p < c.len[r]; ++p) row[p] = r % 2 ? hazard_value(rng) : rng.normal();
    }
  }
  std::vector<int32_t> one_cta, clusters;
  {
    SCOPED_TRACE("one CTA per row");
    expect_gpu_matches_ref(c, {.cluster_size = 1}, &one_cta);
  }
  {
    SCOPED_TRACE("8-CTA clusters");
    expect_gpu_matches_ref(c, {.max_chunk = 5248, .cluster_size = 8}, &clusters);
  }
  EXPECT_TRUE(one_cta == clusters) << "the output depends on the path the candidates took";
}

// Rows split over 8 CTAs of 128-float chunks, so short enough that the last ranks' chunks are
// empty (len 129: ranks 7 and beyond the row), down to one CTA (len <= 125).
TEST_F(TopkCuda, ClusterRanksWithEmptyChunks) {
  Rng rng(testing::test_seed());
  TopkCase c(8, 200, 64);
  c.len = {129, 130, 133, 150, 200, 125, 199, 197};
  c.col_base = {0, 3, 1, 50, 0, 2, 1, 3};
  for (auto& v : c.logits) v = hazard_value(rng);
  std::vector<int32_t> clusters, one_cta;
  expect_gpu_matches_ref(c, {.max_chunk = 512, .cluster_size = 8}, &clusters);
  expect_gpu_matches_ref(c, {.cluster_size = 1}, &one_cta);
  EXPECT_TRUE(clusters == one_cta);
}

// Rows wider than 8 chunks of the largest size go to the streaming kernel by default.
TEST_F(TopkCuda, RowsWiderThanAClusterTakeTheStreamKernel) {
  Rng rng(testing::test_seed());
  const int32_t ld = 8 * kTopkMaxChunk + 4;
  TopkCase c(3, ld, 2048);
  c.len = {ld, ld - 5, 70000};
  c.col_base = {0, 5, 100};
  for (auto& v : c.logits) v = rng.normal();
  TopkParams p = c.params();
  ASSERT_EQ(choose_topk_launch(p, 132).path, TopkLaunch::Path::kStream);
  expect_gpu_matches_ref(c);
}

// The launch rule: the fewest CTAs per row that hold ld, more while the grid stays within half the
// SMs and the chunks keep >= kTopkMinSplitChunk floats; an explicit cluster_size only adds CTAs;
// more rows of >= 64K than SMs take the streaming kernel.
TEST(TopkLaunchRule, ClusterSizeFromRowsAndWidth) {
  auto pick = [](int32_t rows, int32_t ld, int32_t cluster_size = 0, int32_t stream_min_rows = -1) {
    TopkParams p;
    p.rows = rows;
    p.logits_ld = ld;
    p.cluster_size = cluster_size;
    p.stream_min_rows = stream_min_rows;
    return choose_topk_launch(p, 132);
  };
  EXPECT_EQ(pick(256, 131072, 0, INT32_MAX).cluster, 4);  // one pass: the fewest that hold ld
  EXPECT_EQ(pick(32, 8192).cluster, 1);                   // chunks would fall below 8192
  EXPECT_EQ(pick(32, 32768).cluster, 2);                  // 64 CTAs: within half the SMs
  EXPECT_EQ(pick(32, 65536).cluster, 2);   // the fewest that hold 64K; 128 CTAs would be too many
  EXPECT_EQ(pick(128, 32768).cluster, 1);  // 128 rows fill the SMs
  EXPECT_EQ(pick(128, 65536).cluster, 2);  // the fewest that hold 64K
  EXPECT_EQ(pick(4, 131072).cluster, 8);
  // More wide rows than SMs: the streaming kernel, one CTA per row.
  EXPECT_EQ(pick(256, 131072).path, TopkLaunch::Path::kStream);
  EXPECT_EQ(pick(256, 131072).cluster, 1);
  EXPECT_EQ(pick(256, 32768).path, TopkLaunch::Path::kOnePass);
  EXPECT_EQ(pick(128, 32768, 8).cluster, 8);
  EXPECT_EQ(pick(128, 65536, 1).cluster, 2);  // never fewer than hold ld
  const TopkLaunch l = pick(16, 32768);
  EXPECT_EQ(l.path, TopkLaunch::Path::kOnePass);
  EXPECT_EQ(l.cluster, 4);
  EXPECT_GE(int64_t{l.chunk_cap} * l.cluster, 32768 + 3);
  EXPECT_EQ(l.chunk_cap % 128, 0);
  EXPECT_EQ(pick(4, 8 * kTopkMaxChunk).path, TopkLaunch::Path::kStream);
  EXPECT_EQ(pick(4, 8 * kTopkMaxChunk - 4).path, TopkLaunch::Path::kOnePass);
}

TEST_F(TopkCuda, V32ShapeRandom) {
  Rng rng(testing::test_seed());
  TopkCase c(32, 32768, 2048);
  for (int32_t r = 0; r < 32; ++r) {
    c.len[r] = r < 28 ? 32768 : int32_t(rng.randint(0, 32768));
    fill_normal(c, r, rng);
  }
  expect_gpu_matches_ref(c);
}

// Paged variant over a scattered page table, out_row routing and one -1 row; one long row.
TEST_F(TopkCuda, PagedVariantGivesGlobalSlots) {
  Rng rng(testing::test_seed());
  const int32_t num_pages = 4000, width = 1600, ld = 100096;
  testing::PageTableBuffer table(7, width, num_pages);
  std::vector<int32_t> free_pages = rng.permutation(1, num_pages);
  TopkCase c(6, ld, 128);
  c.variant = TopkVariant::kPaged;
  c.len = {0, 100, 128, 768, 333, 100000};
  c.out_row = {2, 0, 4, 1, -1, 5};
  c.row_page = {3, 1, 5, 2, 4, 6};  // indexed by OUTPUT row
  for (int32_t r = 0; r < 6; ++r) {
    const int32_t o = c.out_row[r];
    if (o >= 0) table.assign(c.row_page[o], std::max(c.len[r], 1), free_pages);
    fill_hazard(c, r, rng);
  }
  c.page_table = table.table();
  expect_gpu_matches_ref(c);
}

TEST_F(TopkCuda, RaggedVariantAddsOffset) {
  Rng rng(testing::test_seed());
  TopkCase c(4, 70000, 256);
  c.variant = TopkVariant::kRagged;
  c.len = {50, 300, 2000, 70000};
  c.offset = {0, 1000, 123456, 5};
  for (int32_t r = 0; r < 4; ++r) fill_hazard(c, r, rng);
  expect_gpu_matches_ref(c);
}

TEST_F(TopkCuda, OutRowMapsRowsAndLeavesOthersUntouched) {
  Rng rng(testing::test_seed());
  TopkCase c(4, 400, 64, 6);
  c.len = {400, 10, 200, 0};
  c.out_row = {5, -1, 0, 3};
  for (auto& v : c.logits) v = rng.normal();
  expect_gpu_matches_ref(c);
}

TEST_F(TopkCuda, HostValidation) {
  TopkCase c(2, 256, 64);
  c.len = {10, 200};
  auto code = [&](std::function<void(TopkParams&)> edit) {
    StatusOr<GpuRun> run = run_gpu(c, {.edit = std::move(edit)});
    EXPECT_TRUE(run.ok()) << run.status().to_string();
    return run.ok() ? run->op.code() : StatusCode::kOk;
  };
  EXPECT_EQ(code([](TopkParams& p) { p.k = 100; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.logits_ld = 254; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.long_row_min_len = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.cluster_max_rows = -1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.max_chunk = 4000; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.cluster_size = 3; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.stream_min_rows = -2; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.logits += 1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.idx = nullptr; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](TopkParams& p) { p.rows = 0; }), StatusCode::kOk);
}

// ---- checked mode: the device error word ------------------------------------------------------

// Three rows of a paged call over pages 1..4 (page-table rows 1 and 2), all valid (as the
// reference's reject tests).
class TopkCudaChecked : public ::testing::Test {
 protected:
  TopkCudaChecked() : c(3, 256, 64) {
    Rng rng(testing::test_seed());
    for (auto& v : c.logits) v = rng.normal();
    c.len = {100, 0, 128};
    c.variant = TopkVariant::kPaged;
    table = {0, 0, 1, 2, 3, 4};  // [3 rows, W = 2]
    c.page_table = PageTable{table.data(), 3, 2, 5};
    c.row_page = {1, 2, 2};
  }
  void SetUp() override { DSA_SKIP_WITHOUT_GPU(); }
  // The GPU returns the reference's code, and the error word is clear afterwards.
  void expect_code(StatusCode want, const GpuOptions& opt = {}) {
    TopkCase ref = c;
    TopkParams rp = ref.params();
    rp.plan = opt.plan;
    EXPECT_EQ(topk_ref(rp).code(), want) << "reference";
    StatusOr<GpuRun> run = run_gpu(c, opt);
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    EXPECT_EQ(run->op.code(), want) << run->op.to_string();
    Status after = cuda::take_device_error("after");
    EXPECT_TRUE(after.ok()) << after.to_string();
  }
  ScopedCheckedMode checked_{true};
  TopkCase c;
  std::vector<int32_t> table;
};

TEST_F(TopkCudaChecked, ValidCallPasses) { expect_code(StatusCode::kOk); }
TEST_F(TopkCudaChecked, NegativeLength) {
  c.len[1] = -4;
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, NegativeColBase) {
  c.col_base = {0, -3, 0};
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, WindowPastLd) {
  c.col_base = {0, 0, 200};
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, OutRowOutOfRange) {
  c.out_row = {0, 3, 1};
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, OutRowNegativeOtherThanMinusOne) {
  c.out_row = {-2, 1, 2};
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, OutRowRepeated) {
  c.out_row = {2, -1, 2};
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, NotWrittenRowStillChecked) {
  c.out_row = {0, -1, 2};
  c.len[1] = -1;
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, PageIdInReservedPage) {
  table[3] = 0;
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, PageIdBeyondPool) {
  table[4] = 5;
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, RowPageOutOfRange) {
  c.row_page[2] = 3;
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, LengthNeedsMorePagesThanWidth) {
  c.len[0] = 200;
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, RaggedNegativeOffset) {
  c.variant = TopkVariant::kRagged;
  c.offset = {0, 0, -7};
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, RaggedOffsetOverflows) {
  c.variant = TopkVariant::kRagged;
  c.offset = {INT32_MAX - 50, 0, 0};
  expect_code(StatusCode::kOutOfRange);
}
TEST_F(TopkCudaChecked, PlanHeaders) {
  const TopkPlanHeader good = build_topk_plan_header(c.len.data(), 3, 64);
  expect_code(StatusCode::kOk, {.plan = &good});
  TopkPlanHeader bad = good;
  bad.len_hash ^= 1;
  expect_code(StatusCode::kFailedPrecondition, {.plan = &bad});
  bad = good;
  bad.magic = 0x31415344;
  expect_code(StatusCode::kFailedPrecondition, {.plan = &bad});
  bad = good;
  bad.k = 128;
  expect_code(StatusCode::kFailedPrecondition, {.plan = &bad});
}

// Magic, R and K are checked on the device in unchecked mode too (the word is set, the call does
// not synchronise); the hash is not.
TEST_F(TopkCudaChecked, UncheckedPlanCheckStillReports) {
  ScopedCheckedMode unchecked(false);
  TopkPlanHeader bad = build_topk_plan_header(c.len.data(), 3, 64);
  bad.len_hash ^= 1;
  StatusOr<GpuRun> run = run_gpu(c, {.plan = &bad});
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_TRUE(run->op.ok());
  EXPECT_TRUE(cuda::take_device_error("hash").ok());
  bad.magic = 1;
  run = run_gpu(c, {.plan = &bad});
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_TRUE(run->op.ok());
  EXPECT_EQ(cuda::take_device_error("magic").code(), StatusCode::kFailedPrecondition);
}

// ---- unchecked mode: neutralisation equals the reference's ----------------------------------

class TopkCudaUnchecked : public TopkCudaChecked {
 protected:
  void run_and_compare() {
    expect_gpu_matches_ref(c);
    Status after = cuda::take_device_error("unchecked");
    EXPECT_TRUE(after.ok()) << "unchecked mode must not report data errors: " << after.to_string();
  }
  ScopedCheckedMode unchecked_{false};
};

TEST_F(TopkCudaUnchecked, NegativeLengthGivesEmptyRow) {
  c.len[0] = -4;
  run_and_compare();
}
TEST_F(TopkCudaUnchecked, LengthClampedToLd) {
  c.variant = TopkVariant::kPlain;
  c.col_base = {-5, 0, 250};
  c.len = {300, INT32_MAX, 128};
  run_and_compare();
}
TEST_F(TopkCudaUnchecked, HugeLengthsOnClusters) {
  c.variant = TopkVariant::kPlain;
  c.col_base = {1, 0, INT32_MIN};
  c.len = {INT32_MAX, INT32_MIN, INT32_MAX};
  expect_gpu_matches_ref(c, {.long_row_min_len = 65});
  expect_gpu_matches_ref(c, {.max_chunk = 512, .cluster_size = 8});
}
TEST_F(TopkCudaUnchecked, BadOutRowIsNotWritten) {
  c.out_row = {7, 0, -3};
  run_and_compare();
}
TEST_F(TopkCudaUnchecked, RepeatedOutRowLastWins) {
  c.variant = TopkVariant::kPlain;
  c.out_row = {1, 1, -1};
  run_and_compare();
}
TEST_F(TopkCudaUnchecked, BadPagesBecomePageZero) {
  table[2] = -9;
  c.row_page[2] = 40;
  c.len = {70, 200, 70};
  run_and_compare();
}
TEST_F(TopkCudaUnchecked, RaggedOffsetWraps) {
  c.variant = TopkVariant::kRagged;
  c.offset = {INT32_MAX - 50, -100, 7};
  run_and_compare();
}

}  // namespace
}  // namespace dsa::kernels
