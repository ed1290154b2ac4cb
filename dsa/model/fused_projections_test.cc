// Projections fused at load (fused_projections.h) on the CPU: the tiny model (bf16) and a
// narrowed FP8 one (V3.2's quantization, random weights from the host image and from the backend
// fill) give the unfused model's logits and hidden rows bit for bit, each fusion alone and both, in
// EXTEND, TARGET_VERIFY and the MTP layer's DRAFT_EXTEND; the store's fused rows are the parts'
// bytes in order; and what cannot be fused is refused by name.
#include "dsa/model/fused_projections.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/model/model_test_util.h"
#include "dsa/testing/random.h"

namespace dsa::model {
namespace {

using runtime::ForwardMode;
using runtime::ModelKind;

std::string tiny_dir() { return std::string(DSA_SOURCE_DIR) + "/models/tiny-dsa"; }

// Every output of three forwards: a 24-token prompt (EXTEND: past the 16 rows up to which the
// shared expert runs grouped, so there its tables hold it but its own MLP runs), two verify rows of
// two requests over unwritten context, and the MTP layer over the verify's rows.
struct Outputs {
  std::vector<float> logits;
  std::vector<bf16> hidden;
  FuseCounts counts;
  bool ok = false;
};

Outputs run_three_forwards(const std::string& dir, FuseOptions fuse, bool random_weights,
                           bool in_backend, const kernels::OpTable& ops = kernels::cpu_ops()) {
  ModelOptions o;
  o.max_requests = 4;
  o.max_context = 128;
  o.max_extend_rows = 32;
  o.num_draft_tokens = 1;
  o.fuse = fuse;
  o.random_weights = random_weights;
  o.random_seed = 11;
  o.random_weights_in_backend = in_backend;
  Outputs r;
  auto m = DsaModel::load(dir, o, ops);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return r;
  DsaModel& model = **m;
  r.counts = model.fuse_counts();
  auto a = model.pages().open_request(), b = model.pages().open_request();
  EXPECT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(model.pages().reserve(*a, 32).ok() && model.pages().reserve(*b, 16).ok());
  auto append = [&](const ForwardOutput& out) {
    r.logits.insert(r.logits.end(), out.logits.begin(), out.logits.end());
    r.hidden.insert(r.hidden.end(), out.hidden.begin(), out.hidden.end());
  };
  runtime::ForwardBatch fb;
  fb.mode = ForwardMode::kExtend;
  fb.requests = {{*a, 0, 24, 23, 1}};
  std::vector<int32_t> prompt = {0, 5, 17, 300, 4000, 6000, 42, 42, 1, 7};
  for (int32_t i = 0; i < 14; ++i) prompt.push_back(100 + 37 * i);
  ForwardOutput out;
  Status s = model.forward(fb, prompt, {}, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  append(out);
  fb.mode = ForwardMode::kTargetVerify;
  fb.requests = {{*a, 24, 2, 0, -1}, {*b, 5, 2, 0, -1}};
  const std::vector<int32_t> rows = {11, 12, 13, 14};
  s = model.forward(fb, rows, {}, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  append(out);
  runtime::ForwardBatch mb = fb;
  mb.model = ModelKind::kMtp;
  mb.mode = ForwardMode::kDraftExtend;
  for (runtime::RequestInput& q : mb.requests) q.sample_count = 1;
  const size_t D = size_t(model.config().hidden_size);
  const std::vector<bf16> hidden(out.hidden.begin(), out.hidden.begin() + long(4 * D));
  s = model.forward(mb, rows, hidden, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  append(out);
  r.ok = !r.logits.empty() && !r.hidden.empty() && !::testing::Test::HasFailure();
  return r;
}

void expect_same_bits(const Outputs& got, const Outputs& want, const std::string& what) {
  ASSERT_TRUE(got.ok && want.ok) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  ASSERT_EQ(got.hidden.size(), want.hidden.size()) << what;
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * sizeof(float)),
            0)
      << what << ": logits differ";
  EXPECT_EQ(std::memcmp(got.hidden.data(), want.hidden.data(), got.hidden.size() * sizeof(bf16)), 0)
      << what << ": hidden rows differ";
  // Not a comparison of two empty or constant outputs.
  float lo = got.logits[0], hi = got.logits[0];
  for (float x : got.logits) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GT(hi - lo, 1e-3f) << what;
}

constexpr std::array<FuseOptions, 4> kFused = {
    FuseOptions{true, false, false}, FuseOptions{false, true, false},
    FuseOptions{false, false, true}, FuseOptions{true, true, true}};

TEST(FusedProjections, TinyModelIsTheUnfusedModelBitForBit) {
  const Outputs plain = run_three_forwards(tiny_dir(), {false, false, false}, false, false);
  EXPECT_EQ(plain.counts.qkv_a, 0);
  EXPECT_EQ(plain.counts.q_b, 0);
  EXPECT_EQ(plain.counts.shared_experts, 0);
  for (const FuseOptions& f : kFused) {
    const Outputs fused = run_three_forwards(tiny_dir(), f, false, false);
    // 4 target blocks and the MTP block; the 3 MoE target blocks and the MTP block's MoE.
    EXPECT_EQ(fused.counts.qkv_a, f.qkv_a ? 5 : 0);
    EXPECT_EQ(fused.counts.q_b, f.q_b ? 5 : 0);
    EXPECT_EQ(fused.counts.shared_experts, f.shared_experts ? 4 : 0);
    expect_same_bits(fused, plain,
                     "qkv_a " + std::to_string(f.qkv_a) + " q_b " + std::to_string(f.q_b) +
                         " shared " + std::to_string(f.shared_experts));
  }
}

// The CPU ops with the two fused row-transform ops counted, so a test sees that they ran.
int g_prologue_calls = 0, g_query_calls = 0;
Status counted_prologue(const kernels::AttentionPrologueParams& p) {
  ++g_prologue_calls;
  return kernels::attention_prologue_ref(p);
}
Status counted_query(const kernels::IndexerQueryParams& p) {
  ++g_query_calls;
  return kernels::indexer_query_ref(p);
}
const kernels::OpTable& counting_cpu_ops() {
  static const kernels::OpTable table = [] {
    kernels::OpTable t = kernels::cpu_ops();
    t.attention_prologue = counted_prologue;
    t.indexer_query = counted_query;
    return t;
  }();
  return table;
}

// The fused row-transform ops (FuseOptions::row_ops) against the separate ops, with the
// projections unfused (dense indexer queries from wq_b) and fused (the queries read in place):
// the same bits, and the fused ops ran once per attention block and forward (5 blocks: 4 target
// layers and the MTP layer; 3 forwards, 2 of the target) only when on.
TEST(FusedProjections, FusedRowOpsAreTheSeparateOpsBitForBit) {
  for (bool projections : {false, true}) {
    FuseOptions on{projections, projections, projections, true};
    FuseOptions off = on;
    off.row_ops = false;
    g_prologue_calls = g_query_calls = 0;
    const Outputs fused = run_three_forwards(tiny_dir(), on, false, false, counting_cpu_ops());
    EXPECT_EQ(g_prologue_calls, 4 * 2 + 1);
    EXPECT_EQ(g_query_calls, 4 * 2 + 1);
    g_prologue_calls = g_query_calls = 0;
    const Outputs separate = run_three_forwards(tiny_dir(), off, false, false, counting_cpu_ops());
    EXPECT_EQ(g_prologue_calls, 0);
    EXPECT_EQ(g_query_calls, 0);
    expect_same_bits(fused, separate, projections ? "projections fused" : "projections unfused");
  }
}

// The tiny config with V3.2's FP8 quantization (q_lora 128 and wk 128 end on scale blocks; kv_a's
// 576 ends inside one), weights random: from the host image and generated in backend memory.
TEST(FusedProjections, Fp8ModelIsTheUnfusedModelBitForBit) {
  testing::TempDir dir;
  testing::write_tiny_fp8_config(dir / "");
  for (bool in_backend : {false, true}) {
    const Outputs plain = run_three_forwards(dir / "", {false, false, false}, true, in_backend);
    const Outputs fused = run_three_forwards(dir / "", {true, true, true}, true, in_backend);
    EXPECT_EQ(fused.counts.qkv_a, 5);
    EXPECT_EQ(fused.counts.q_b, 5);
    EXPECT_EQ(fused.counts.shared_experts, 4);
    expect_same_bits(fused, plain, in_backend ? "FP8, backend fill" : "FP8, host image");
  }
}

LinearWeight bf16_linear(dsa::testing::Rng& rng, int32_t out, int32_t in) {
  LinearWeight w;
  w.out = out, w.in = in;
  w.bf16_w = rng.bf16_vector(size_t(out) * size_t(in));
  return w;
}

LinearWeight fp8_linear(dsa::testing::Rng& rng, int32_t out, int32_t in) {
  LinearWeight w;
  w.out = out, w.in = in;
  w.fp8_w.resize(size_t(out) * size_t(in));
  for (uint8_t& b : w.fp8_w) b = uint8_t(rng.randint(0, 0x7E));
  w.scale_inv.resize(size_t((out + 127) / 128) * size_t((in + 127) / 128));
  for (float& s : w.scale_inv) s = rng.uniform(0.5f, 2.f);
  return w;
}

template <typename T>
std::vector<T> backend_bytes(const WeightStore& store, const std::vector<T>& key, size_t n) {
  const T* p = store.get(key);
  return std::vector<T>(p, p + n);
}

TEST(WeightStoreFuseRows, RowsOfThePartsInOrder) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  WeightStore store(kernels::Backend::kCpu);
  const LinearWeight a = bf16_linear(rng, 3, 40), b = bf16_linear(rng, 5, 40);
  LinearWeight fused;
  fused.out = 8, fused.in = 40;
  const std::array<const LinearWeight*, 2> parts = {&a, &b};
  ASSERT_TRUE(store.fuse_rows(fused, parts).ok());
  std::vector<bf16> want = a.bf16_w;
  want.insert(want.end(), b.bf16_w.begin(), b.bf16_w.end());
  const std::vector<bf16> got = backend_bytes(store, fused.bf16_w, want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(bf16)), 0);

  const LinearWeight p = fp8_linear(rng, 256, 300), q = fp8_linear(rng, 70, 300);
  LinearWeight f8;
  f8.out = 326, f8.in = 300, f8.fp8 = true;
  const std::array<const LinearWeight*, 2> f8_parts = {&p, &q};
  ASSERT_TRUE(store.fuse_rows(f8, f8_parts).ok());
  std::vector<uint8_t> codes = p.fp8_w;
  codes.insert(codes.end(), q.fp8_w.begin(), q.fp8_w.end());
  EXPECT_EQ(backend_bytes(store, f8.fp8_w, codes.size()), codes);
  std::vector<float> scales = p.scale_inv;  // 2 + 1 block rows of 3 blocks
  scales.insert(scales.end(), q.scale_inv.begin(), q.scale_inv.end());
  EXPECT_EQ(scales.size(), 9u);
  EXPECT_EQ(backend_bytes(store, f8.scale_inv, scales.size()), scales);
}

TEST(WeightStoreFuseRows, RefusesWhatCannotShareOneLinear) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  WeightStore store(kernels::Backend::kCpu);
  const LinearWeight a = bf16_linear(rng, 4, 40), wide = bf16_linear(rng, 4, 48);
  const LinearWeight f8 = fp8_linear(rng, 100, 128), f8b = fp8_linear(rng, 128, 128);
  auto refuses = [&](LinearWeight dst, std::vector<const LinearWeight*> parts,
                     const std::string& needle) {
    Status s = store.fuse_rows(dst, parts);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  };
  LinearWeight d8;
  d8.out = 8, d8.in = 40;
  refuses(d8, {&a, &wide}, "part 1 is [4, 48] bf16");
  refuses(d8, {&a, &f8}, "part 1 is [100, 128] FP8");
  LinearWeight d228;
  d228.out = 228, d228.in = 128, d228.fp8 = true;
  refuses(d228, {&f8, &f8b}, "FP8 part 0 has out = 100");
  LinearWeight d9;
  d9.out = 9, d9.in = 40;
  refuses(d9, {&a, &a}, "the fused weight is [9, 40] bf16, its parts [8, 40] bf16");
  refuses(d8, {}, "no parts");
}

TEST(WeightStoreExpertTables, SharedExpertMustBeARoutedExpertsShape) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  WeightStore store(kernels::Backend::kCpu);
  MoeWeights m;
  for (int e = 0; e < 2; ++e)
    m.experts.push_back(
        {bf16_linear(rng, 8, 16), bf16_linear(rng, 8, 16), bf16_linear(rng, 16, 8)});
  Status s = store.add_expert_tables(m, true);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("without one"), std::string::npos) << s.to_string();
  m.shared =
      MlpWeights{bf16_linear(rng, 16, 16), bf16_linear(rng, 16, 16), bf16_linear(rng, 16, 16)};
  s = store.add_expert_tables(m, true);
  EXPECT_NE(s.message().find("shared expert's gate weight is [16, 16]"), std::string::npos)
      << s.to_string();
  m.shared = MlpWeights{bf16_linear(rng, 8, 16), bf16_linear(rng, 8, 16), bf16_linear(rng, 16, 8)};
  ASSERT_TRUE(store.add_expert_tables(m, true).ok());
  ASSERT_NE(store.expert_tables(m), nullptr);
  EXPECT_TRUE(store.expert_tables(m)->shared_in_table);
  ASSERT_TRUE(store.add_expert_tables(m).ok());  // rebuilt without it
  EXPECT_FALSE(store.expert_tables(m)->shared_in_table);
}

}  // namespace
}  // namespace dsa::model
