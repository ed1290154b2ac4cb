// GPU tests of moe_group_cuda and grouped_linear_cuda against the CPU references (SPEC.md §8.6):
// the grouping bit-exact on fresh random ids (tiny and V3.2 shapes, poisoned outputs), the
// grouped linear within |d| <= 2^-7 |ref| + 1e-3 (the fp32 accumulation order differs) with
// unwritten rows still poisoned, the checked error word and the unchecked neutralisation, and a
// CUDA-graph capture of moe_group + two grouped linears replayed on new inputs, bit-identical to
// an eager run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::host;
using testing::is_poison;
using testing::Rng;

// ---------------------------------------------------------------------------------------------
// moe_group
// ---------------------------------------------------------------------------------------------

struct GroupOut {
  std::vector<int32_t> offsets, pair_row, pair_slot;
  Status status;
};

GroupOut group_gpu(const std::vector<int32_t>& ids, int32_t experts, int32_t k) {
  const size_t S = ids.size();
  auto d_ids = dev(ids.empty() ? std::vector<int32_t>{0} : ids);
  auto d_off = testing::poisoned<int32_t>(size_t(experts) + 1, 0x80);
  auto d_row = testing::poisoned<int32_t>(std::max<size_t>(S, 1), 0x80);
  auto d_slot = testing::poisoned<int32_t>(std::max<size_t>(S, 1), 0x80);
  MoeGroupParams p;
  p.expert_ids = d_ids.data();
  p.num_slots = static_cast<int32_t>(S);
  p.num_experts = experts;
  p.k = k;
  p.offsets = d_off.data();
  p.pair_row = d_row.data();
  p.pair_slot = d_slot.data();
  GroupOut r;
  r.status = moe_group_cuda(p);
  r.offsets = host(d_off);
  r.pair_row = host(d_row);
  r.pair_slot = host(d_slot);
  r.pair_row.resize(S);
  r.pair_slot.resize(S);
  return r;
}

GroupOut group_cpu(const std::vector<int32_t>& ids, int32_t experts, int32_t k) {
  GroupOut r;
  r.offsets.assign(size_t(experts) + 1, INT32_MIN);
  r.pair_row.assign(ids.size(), INT32_MIN);
  r.pair_slot.assign(ids.size(), INT32_MIN);
  MoeGroupParams p;
  p.expert_ids = ids.data();
  p.num_slots = static_cast<int32_t>(ids.size());
  p.num_experts = experts;
  p.k = k;
  p.offsets = r.offsets.data();
  p.pair_row = r.pair_row.data();
  p.pair_slot = r.pair_slot.data();
  r.status = moe_group_ref(p);
  return r;
}

void expect_same_grouping(const GroupOut& got, const GroupOut& want, const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.to_string();
  ASSERT_TRUE(want.status.ok()) << what << ": " << want.status.to_string();
  EXPECT_EQ(got.offsets, want.offsets) << what;
  EXPECT_EQ(got.pair_row, want.pair_row) << what;
  EXPECT_EQ(got.pair_slot, want.pair_slot) << what;
}

TEST(MoeGroupCuda, RandomMatchesReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  struct Shape {
    int32_t rows, experts, k;
  } shapes[] = {{256, 256, 8}, {4096, 256, 8}, {100, 512, 8}, {9000, 64, 8}};
  for (int32_t rows = 1; rows <= 300; rows += int32_t(rng.randint(1, 40))) {
    const auto ids = random_expert_ids(rng, rows, 4, 2, 5);
    expect_same_grouping(group_gpu(ids, 4, 2), group_cpu(ids, 4, 2),
                         "E 4 rows " + std::to_string(rows));
  }
  for (const Shape& s : shapes) {
    const auto ids = random_expert_ids(rng, s.rows, s.experts, s.k, 7);
    expect_same_grouping(group_gpu(ids, s.experts, s.k), group_cpu(ids, s.experts, s.k),
                         "E " + std::to_string(s.experts) + " rows " + std::to_string(s.rows));
  }
  // Ids with replacement and scattered holes: many equal ids inside one warp and one chunk.
  for (int32_t experts : {1, 3, 256}) {
    std::vector<int32_t> ids(size_t(2000) * 4);
    for (auto& id : ids) id = int32_t(rng.randint(-1, experts - 1));
    expect_same_grouping(group_gpu(ids, experts, 4), group_cpu(ids, experts, 4),
                         "holes E " + std::to_string(experts));
  }
}

TEST(MoeGroupCuda, EdgeShapes) {
  DSA_SKIP_WITHOUT_GPU();
  expect_same_grouping(group_gpu({}, 8, 8), group_cpu({}, 8, 8), "no slots");
  const std::vector<int32_t> padded(64, -1);
  expect_same_grouping(group_gpu(padded, 256, 8), group_cpu(padded, 256, 8), "all padded");
  const std::vector<int32_t> one = {0, -1, 0, 0};
  expect_same_grouping(group_gpu(one, 1, 1), group_cpu(one, 1, 1), "E = 1");
  const GroupOut big = group_gpu(std::vector<int32_t>(4, 0), 513, 1);
  EXPECT_EQ(big.status.code(), StatusCode::kUnimplemented) << big.status.to_string();
}

TEST(MoeGroupCuda, CheckedBadIdIsOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  std::vector<int32_t> ids(1024, 1);
  ids[700] = -3;
  ids[901] = 9;  // the lowest bad slot is reported
  const GroupOut r = group_gpu(ids, 4, 2);
  EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << r.status.to_string();
  EXPECT_NE(r.status.message().find("expert_ids[index]"), std::string::npos)
      << r.status.to_string();
  EXPECT_NE(r.status.message().find("index 700 (value -3)"), std::string::npos)
      << r.status.to_string();
  ids[700] = ids[901] = 2;
  EXPECT_TRUE(group_gpu(ids, 4, 2).status.ok());  // the word was cleared
}

TEST(MoeGroupCuda, UncheckedBadIdIsNotDispatched) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const std::vector<int32_t> ids = {0, 1, 2, 3, 0, 4, -7, 2};
  expect_same_grouping(group_gpu(ids, 4, 2), group_cpu(ids, 4, 2), "unchecked");
}

// ---------------------------------------------------------------------------------------------
// grouped_linear
// ---------------------------------------------------------------------------------------------

// A routed problem: x [rows, in], ids [rows, k] grouped by moe_group_ref, W_g = matrix
// g % w.size(), y [rows * k, out]. down = true runs the down-projection form instead: x has one
// row per pair (x_row null) and y_row = pair_slot.
struct GlCase {
  int32_t rows = 0, experts = 0, k = 0, in = 0, out = 0;
  bool down = false;
  std::vector<int32_t> ids;
  GroupOut grouping;
  std::vector<bf16> x;
  std::vector<std::vector<bf16>> w;
  int32_t slots() const { return rows * k; }
  int32_t x_rows() const { return down ? slots() : rows; }
};

GlCase make_case(Rng& rng, int32_t rows, int32_t experts, int32_t k, int32_t in, int32_t out,
                 int32_t distinct_weights, bool down = false) {
  GlCase c{rows, experts, k, in, out, down};
  c.ids = random_expert_ids(rng, rows, experts, k, 5);
  c.grouping = group_cpu(c.ids, experts, k);
  c.x = rng.bf16_vector(size_t(c.x_rows()) * in);
  for (int32_t m = 0; m < distinct_weights; ++m)
    c.w.push_back(rng.bf16_vector(size_t(out) * in, 1.f / std::sqrt(float(in))));
  return c;
}

GroupedLinearParams gl_params(const GlCase& c, const bf16* x, const bf16* const* weights,
                              const int32_t* offsets, const int32_t* pair_row,
                              const int32_t* pair_slot, bf16* y) {
  GroupedLinearParams p;
  p.x = x;
  p.x_rows = c.x_rows();
  p.x_row = c.down ? nullptr : pair_row;
  p.weights = weights;
  p.offsets = offsets;
  p.num_groups = c.experts;
  p.capacity = c.slots();
  p.in_features = c.in;
  p.out_features = c.out;
  p.y = y;
  p.y_rows = c.slots();
  p.y_row = pair_slot;
  return p;
}

struct GlOut {
  std::vector<bf16> y;
  Status status;
};

GlOut gl_cpu(const GlCase& c) {
  std::vector<const bf16*> weights(static_cast<size_t>(c.experts));
  for (int32_t g = 0; g < c.experts; ++g) weights[g] = c.w[g % c.w.size()].data();
  GlOut r;
  r.y.assign(size_t(c.slots()) * c.out, testing::poison_value<bf16>());
  r.status = grouped_linear_ref(gl_params(c, c.x.data(), weights.data(), c.grouping.offsets.data(),
                                          c.grouping.pair_row.data(), c.grouping.pair_slot.data(),
                                          r.y.data()));
  return r;
}

// Device copies of a case's inputs. `offsets` / `rows` override the grouping (checked tests).
struct GlDevice {
  DeviceBuffer<bf16> x, y;
  std::vector<DeviceBuffer<bf16>> w;
  DeviceBuffer<const bf16*> weights;
  DeviceBuffer<int32_t> offsets, pair_row, pair_slot;
  GroupedLinearParams params(const GlCase& c) const {
    return gl_params(c, x.data(), weights.data(), offsets.data(), pair_row.data(), pair_slot.data(),
                     y.data());
  }
};

GlDevice upload(const GlCase& c) {
  GlDevice d;
  d.x = dev(c.x);
  for (const auto& m : c.w) d.w.push_back(dev(m));
  std::vector<const bf16*> ptrs(static_cast<size_t>(c.experts));
  for (int32_t g = 0; g < c.experts; ++g) ptrs[g] = d.w[g % d.w.size()].data();
  d.weights = dev(ptrs);
  d.offsets = dev(c.grouping.offsets);
  d.pair_row = dev(c.grouping.pair_row);
  d.pair_slot = dev(c.grouping.pair_slot);
  d.y = testing::poisoned<bf16>(size_t(c.slots()) * c.out);
  return d;
}

GlOut gl_gpu(const GlCase& c) {
  GlDevice d = upload(c);
  GlOut r;
  r.status = grouped_linear_cuda(d.params(c));
  r.y = host(d.y);
  return r;
}

// Written slots within 2^-7 |ref| + 1e-3; every undispatched slot still poisoned.
void expect_close(const GlOut& got, const GlOut& want, const GlCase& c, const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.to_string();
  ASSERT_TRUE(want.status.ok()) << what << ": " << want.status.to_string();
  int bad = 0;
  for (int32_t s = 0; s < c.slots(); ++s) {
    for (int32_t o = 0; o < c.out; ++o) {
      const size_t i = size_t(s) * c.out + o;
      bool ok;
      if (c.ids[s] < 0) {
        ok = is_poison(got.y[i]);
      } else {
        const double g = bf16_to_float(got.y[i]), r = bf16_to_float(want.y[i]);
        ok = std::fabs(g - r) <= 0x1p-7 * std::fabs(r) + 1e-3;
      }
      if (!ok && bad++ < 5) {
        ADD_FAILURE() << what << " y[" << s << "][" << o << "] = " << bf16_to_float(got.y[i])
                      << " (bits " << got.y[i].bits << "), reference " << bf16_to_float(want.y[i])
                      << ", expert " << c.ids[s];
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(GroupedLinearCuda, TinyShapesMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  struct Shape {
    int32_t in, out;
  } shapes[] = {{256, 128}, {128, 256}, {40, 72}, {8, 1}};  // the last two: partial K and N tiles
  for (const Shape& s : shapes) {
    for (int32_t rows : {1, 37, 300}) {
      for (bool down : {false, true}) {
        const GlCase c = make_case(rng, rows, 4, 2, s.in, s.out, 4, down);
        expect_close(gl_gpu(c), gl_cpu(c), c,
                     std::to_string(s.in) + " -> " + std::to_string(s.out) + " rows " +
                         std::to_string(rows) + (down ? " down" : ""));
      }
    }
  }
}

// 2048 pairs from 256 rows, k = 8, 256 experts, 7168 -> 2048; 8 distinct weight matrices keep the
// host reference's inputs small.
TEST(GroupedLinearCuda, V32ShapeMatchesReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const GlCase c = make_case(rng, 256, 256, 8, 7168, 2048, 8);
  expect_close(gl_gpu(c), gl_cpu(c), c, "V3.2 7168 -> 2048");
}

TEST(GroupedLinearCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const GlCase c = make_case(rng, 300, 16, 4, 512, 192, 4);
  const GlOut a = gl_gpu(c), b = gl_gpu(c);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  ASSERT_EQ(testing::first_bit_difference(a.y, b.y), "");
}

// Checked mode: bad offsets, x_row, y_row or weights are OutOfRange through the error word, with
// the array named; the word is cleared afterwards.
struct GroupedCheckedCuda : ::testing::Test {
  Rng rng{testing::test_seed()};
  GlCase c;
  void SetUp() override {
    DSA_SKIP_WITHOUT_GPU();
    c = make_case(rng, 20, 4, 2, 64, 32, 4);
  }
  void expect_error(GlCase bad, const std::string& array, const std::string& where) {
    ScopedCheckedMode checked(true);
    const GlOut r = gl_gpu(bad);
    EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << r.status.to_string();
    EXPECT_NE(r.status.message().find(array), std::string::npos) << r.status.to_string();
    EXPECT_NE(r.status.message().find(where), std::string::npos) << r.status.to_string();
    EXPECT_TRUE(gl_gpu(c).status.ok());  // cleared
  }
};

TEST_F(GroupedCheckedCuda, ValidInputsPass) {
  ScopedCheckedMode checked(true);
  expect_close(gl_gpu(c), gl_cpu(c), c, "checked");
}
TEST_F(GroupedCheckedCuda, FirstOffsetNotZero) {
  GlCase bad = c;
  bad.grouping.offsets[0] = 3;
  expect_error(bad, "offsets[index]", "index 0 (value 3)");
}
TEST_F(GroupedCheckedCuda, DecreasingOffsets) {
  GlCase bad = c;
  bad.grouping.offsets[2] = bad.grouping.offsets[1] - 1;
  expect_error(bad, "offsets[index]",
               "index 2 (value " + std::to_string(bad.grouping.offsets[2]) + ")");
}
TEST_F(GroupedCheckedCuda, LastOffsetBeyondCapacity) {
  GlCase bad = c;
  bad.grouping.offsets[4] = bad.slots() + 1;
  expect_error(bad, "offsets[index]", "index 4 (value " + std::to_string(bad.slots() + 1) + ")");
}
TEST_F(GroupedCheckedCuda, XRowOutOfRange) {
  GlCase bad = c;
  bad.grouping.pair_row[1] = 99;
  expect_error(bad, "x_row[index]", "index 1 (value 99)");
}
TEST_F(GroupedCheckedCuda, YRowOutOfRange) {
  GlCase bad = c;
  bad.grouping.pair_slot[2] = -4;
  expect_error(bad, "y_row[index]", "index 2 (value -4)");
}

TEST(GroupedLinearCuda, CheckedMisalignedWeight) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed());
  GlCase c = make_case(rng, 20, 4, 2, 64, 32, 4);
  GlDevice d = upload(c);
  int32_t g = 0;  // the first group with pairs
  while (c.grouping.offsets[g + 1] == c.grouping.offsets[g]) ++g;
  std::vector<const bf16*> ptrs = {d.w[0].data(), d.w[1].data(), d.w[2].data(), d.w[3].data()};
  ptrs[g] += 1;  // 2 bytes past a 256-byte boundary
  d.weights = dev(ptrs);
  const Status s = grouped_linear_cuda(d.params(c));
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  EXPECT_NE(s.message().find("weights[index]"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("index " + std::to_string(g) + " (value 2)"), std::string::npos)
      << s.to_string();
}

// Unchecked: the same neutralisation as the reference (bad pairs skipped, offsets clamped).
TEST(GroupedLinearCuda, UncheckedNeutralises) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  GlCase c = make_case(rng, 40, 4, 2, 64, 48, 4);
  // Pairs 0 and 3 skipped: their slots stay poisoned (ids marked -1 for expect_close).
  c.ids[size_t(c.grouping.pair_slot[0])] = c.ids[size_t(c.grouping.pair_slot[3])] = -1;
  c.grouping.pair_row[0] = 1000;
  c.grouping.pair_slot[3] = -2;
  c.grouping.offsets[4] = 1 << 20;  // clamped to capacity; the spare pairs' rows are -1
  const GlOut got = gl_gpu(c), want = gl_cpu(c);
  ASSERT_TRUE(got.status.ok() && want.status.ok());
  int mismatched_poison = 0;
  for (size_t i = 0; i < got.y.size(); ++i)
    mismatched_poison += is_poison(got.y[i]) != is_poison(want.y[i]);
  EXPECT_EQ(mismatched_poison, 0);
  expect_close(got, want, c, "unchecked");
}

TEST(GroupedLinearCuda, HostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  GlCase c = make_case(rng, 4, 4, 2, 64, 32, 1);
  GlDevice d = upload(c);
  testing::expect_rejects(
      d.params(c), grouped_linear_cuda,
      {{"in_features", [](auto& p) { p.in_features = 60; }, StatusCode::kInvalidArgument,
        "in_features = 60"},
       {"x alignment", [&](auto& p) { p.x = d.x.data() + 1; },  // 2-byte aligned
        StatusCode::kInvalidArgument, "x must be 16-byte aligned"}});
}

// ---------------------------------------------------------------------------------------------
// CUDA graph: moe_group + gate-style (x_row = pair_row) + down-style (y_row = pair_slot) linears
// captured once on a non-default stream; new ids and x written in place, then replayed.
// ---------------------------------------------------------------------------------------------

struct Chain {
  int32_t rows, experts, k, in, mid, out;
  DeviceBuffer<int32_t> ids, offsets, pair_row, pair_slot;
  DeviceBuffer<bf16> x, h, y;
  std::vector<DeviceBuffer<bf16>> w1, w2;
  DeviceBuffer<const bf16*> t1, t2;

  Status run() const {
    const int32_t S = rows * k;
    MoeGroupParams gp;
    gp.expert_ids = ids.data();
    gp.num_slots = S;
    gp.num_experts = experts;
    gp.k = k;
    gp.offsets = offsets.data();
    gp.pair_row = pair_row.data();
    gp.pair_slot = pair_slot.data();
    DSA_RETURN_IF_ERROR(moe_group_cuda(gp));
    GroupedLinearParams p;
    p.x = x.data();
    p.x_rows = rows;
    p.x_row = pair_row.data();
    p.weights = t1.data();
    p.offsets = offsets.data();
    p.num_groups = experts;
    p.capacity = S;
    p.in_features = in;
    p.out_features = mid;
    p.y = h.data();
    p.y_rows = S;
    DSA_RETURN_IF_ERROR(grouped_linear_cuda(p));
    p.x = h.data();
    p.x_rows = S;
    p.x_row = nullptr;
    p.weights = t2.data();
    p.in_features = mid;
    p.out_features = out;
    p.y = y.data();
    p.y_row = pair_slot.data();
    return grouped_linear_cuda(p);
  }
  void poison() {
    for (auto* b : {&offsets, &pair_row, &pair_slot}) EXPECT_TRUE(b->fill_bytes(0x80).ok());
    for (auto* b : {&h, &y}) EXPECT_TRUE(b->fill_bytes(0xFF).ok());
  }
};

Chain make_chain(Rng& rng, int32_t rows, int32_t experts, int32_t k, int32_t in, int32_t mid,
                 int32_t out) {
  Chain c{rows, experts, k, in, mid, out};
  const size_t S = size_t(rows) * k;
  c.ids = testing::dev_alloc<int32_t>(S);
  c.offsets = testing::dev_alloc<int32_t>(size_t(experts) + 1);
  c.pair_row = testing::dev_alloc<int32_t>(S);
  c.pair_slot = testing::dev_alloc<int32_t>(S);
  c.x = testing::dev_alloc<bf16>(size_t(rows) * in);
  c.h = testing::dev_alloc<bf16>(S * mid);
  c.y = testing::dev_alloc<bf16>(S * out);
  std::vector<const bf16*> p1, p2;
  for (int32_t g = 0; g < experts; ++g) {
    c.w1.push_back(dev(rng.bf16_vector(size_t(mid) * in, 1.f / std::sqrt(float(in)))));
    c.w2.push_back(dev(rng.bf16_vector(size_t(out) * mid, 1.f / std::sqrt(float(mid)))));
    p1.push_back(c.w1.back().data());
    p2.push_back(c.w2.back().data());
  }
  c.t1 = dev(p1);
  c.t2 = dev(p2);
  return c;
}

void new_inputs(Rng& rng, Chain& c) {
  EXPECT_TRUE(c.ids.upload(random_expert_ids(rng, c.rows, c.experts, c.k, 3)).ok());
  EXPECT_TRUE(c.x.upload(rng.bf16_vector(size_t(c.rows) * c.in)).ok());
  c.poison();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(MoeDispatchCuda, GraphReplayMatchesEager) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);  // checked mode synchronises: not capturable
  Rng rng(testing::test_seed());
  Chain c = make_chain(rng, 96, 16, 4, 256, 128, 192);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::set_current_stream(stream);

  new_inputs(rng, c);
  // Warm up first: a kernel's module loads lazily on its first launch, which a global-mode
  // capture refuses.
  ASSERT_TRUE(c.run().ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = c.run();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (int replay = 0; replay < 3; ++replay) {
    new_inputs(rng, c);
    const std::vector<int32_t> ids = host(c.ids);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const auto g_off = host(c.offsets), g_row = host(c.pair_row), g_slot = host(c.pair_slot);
    const auto g_h = host(c.h), g_y = host(c.y);

    c.poison();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(c.run().ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(g_off, host(c.offsets)) << "replay " << replay;
    EXPECT_EQ(g_row, host(c.pair_row)) << "replay " << replay;
    EXPECT_EQ(g_slot, host(c.pair_slot)) << "replay " << replay;
    const auto e_h = host(c.h), e_y = host(c.y);
    ASSERT_EQ(testing::first_bit_difference(g_h, e_h), "") << "h";
    ASSERT_EQ(testing::first_bit_difference(g_y, e_y), "") << "y";
    // The replay computed the new routing: a dispatched slot is written, a padded one is not.
    for (size_t s = 0; s < ids.size(); ++s)
      EXPECT_EQ(is_poison(g_y[s * c.out]), ids[s] < 0) << "slot " << s;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda::set_current_stream(nullptr);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dsa::kernels
