// An FP8-expert MoE layer (SPEC.md §8.6, §8.8; V3.2's experts are FP8) through the model's moe():
// the routed experts now run through the device-side dispatch (moe_group + the FP8 grouped
// linear) on every backend. Checked here on the CPU against the per-expert host formulation the
// dispatch replaced: each (row, choice) slot's expert run densely by linear_ref's FP8 path on
// that row alone, SwiGLU, then the same combine — bit-identical, padded rows included. Also: the
// weight store refuses experts that mix weight forms, naming expert and projection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dsa/kernels/linear/linear.h"
#include "dsa/model/block_parts.h"
#include "dsa/testing/random.h"

namespace dsa::model {
namespace {

using testing::Rng;

constexpr int32_t kExperts = 8, kTopK = 2, kHidden = 256, kInter = 384, kRows = 7;

LinearWeight fp8_weight(Rng& rng, int32_t out, int32_t in) {
  LinearWeight w;
  w.out = out;
  w.in = in;
  w.fp8_w = rng.e4m3_vector(size_t(out) * in, 100.f);
  w.scale_inv.resize(size_t((out + 127) / 128) * size_t((in + 127) / 128));
  for (auto& s : w.scale_inv) s = rng.uniform(0.5f, 2.f) * 0x1p-11f;
  return w;
}

MlpWeights fp8_mlp(Rng& rng) {
  MlpWeights m;
  m.gate = fp8_weight(rng, kInter, kHidden);
  m.up = fp8_weight(rng, kInter, kHidden);
  m.down = fp8_weight(rng, kHidden, kInter);
  return m;
}

ModelConfig moe_config() {
  ModelConfig c;
  c.hidden_size = kHidden;
  c.n_routed_experts = kExperts;
  c.num_experts_per_tok = kTopK;
  c.n_group = 4;
  c.topk_group = 2;
  c.routed_scaling_factor = 2.5;
  c.norm_topk_prob = true;
  return c;
}

// y = x W^T by linear_ref's FP8 path (bf16 output), one call for the given rows.
std::vector<bf16> dense(const LinearWeight& w, const bf16* x, int32_t rows) {
  std::vector<bf16> y(size_t(rows) * w.out);
  kernels::LinearParams p;
  p.x = x;
  p.weight_fp8 = w.fp8_w.data();
  p.weight_scale_inv = w.scale_inv.data();
  p.y = y.data();
  p.num_tokens = rows;
  p.in_features = w.in;
  p.out_features = w.out;
  EXPECT_TRUE(kernels::linear_ref(p).ok());
  return y;
}

// One expert's SwiGLU MLP on `rows` rows, each linear dense through linear_ref.
std::vector<bf16> dense_mlp(const MlpWeights& m, const bf16* x, int32_t rows) {
  std::vector<bf16> g = dense(m.gate, x, rows), u = dense(m.up, x, rows);
  std::vector<bf16> act(g.size());
  EXPECT_TRUE(kernels::swiglu_ref({g.data(), u.data(), act.data(), int64_t(g.size())}).ok());
  return dense(m.down, act.data(), rows);
}

struct MoeFixture {
  Rng rng{testing::test_seed()};
  ModelConfig cf = moe_config();
  MoeWeights w;
  WeightStore store{kernels::Backend::kCpu};
  RopeTables rope;
  runtime::MetadataConfig meta_config;
  runtime::AttentionStep attention{kernels::cpu_ops(), meta_config, runtime::AttentionDims{}};
  runtime::ForwardMetadata meta{meta_config};
  runtime::MetadataArrays arrays;
  runtime::Workspace ws{kernels::Backend::kCpu};
  std::vector<int32_t> row_len;
  std::vector<bf16> x;

  MoeFixture() {
    w.router.out = kExperts;
    w.router.in = kHidden;
    w.router.bf16_w = rng.bf16_vector(size_t(kExperts) * kHidden, 0.2f);
    w.score_bias = rng.normal_vector(kExperts, 0.05f);
    for (int32_t e = 0; e < kExperts; ++e) w.experts.push_back(fp8_mlp(rng));
    w.shared = fp8_mlp(rng);
    x = rng.bf16_vector(size_t(kRows) * kHidden);
    row_len = {3, 0, 1, 5, 0, 2, 9};  // rows 1 and 4 padded: expert ids -1, no dispatch
    arrays.row_len = row_len.data();
  }
  BlockContext context() {
    return BlockContext{kernels::cpu_ops(), cf, store, rope, attention, meta, arrays, ws, nullptr};
  }
};

TEST(MoeFp8, DeviceDispatchEqualsPerExpertDenseLinearRef) {
  MoeFixture f;
  ASSERT_TRUE(f.store.add_expert_tables(f.w).ok());
  const WeightStore::ExpertTables* t = f.store.expert_tables(f.w);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->gate.fp8 && t->up.fp8 && t->down.fp8);

  std::vector<bf16> y(size_t(kRows) * kHidden);
  const Status s = moe(f.context(), f.w, f.x.data(), kRows, y.data());
  ASSERT_TRUE(s.ok()) << s.to_string();

  // The routing, as moe() runs it (not under test: its own op has its own tests).
  std::vector<float> logits(size_t(kRows) * kExperts);
  kernels::LinearParams rl;
  rl.x = f.x.data();
  rl.weight = f.w.router.bf16_w.data();
  rl.y_f32 = logits.data();
  rl.num_tokens = kRows;
  rl.in_features = kHidden;
  rl.out_features = kExperts;
  ASSERT_TRUE(kernels::linear_ref(rl).ok());
  std::vector<int32_t> ids(size_t(kRows) * kTopK);
  std::vector<float> g(ids.size());
  kernels::MoeRoutingParams rp;
  rp.logits = logits.data();
  rp.bias = f.w.score_bias.data();
  rp.row_len = f.row_len.data();
  rp.expert_ids = ids.data();
  rp.weights = g.data();
  rp.num_tokens = kRows;
  rp.num_experts = kExperts;
  rp.num_groups = int32_t(f.cf.n_group);
  rp.topk_group = int32_t(f.cf.topk_group);
  rp.top_k = kTopK;
  rp.routed_scaling_factor = 2.5f;
  rp.norm_topk_prob = true;
  ASSERT_TRUE(kernels::moe_routing_ref(rp).ok());

  // The host formulation: every routed slot's expert densely on its row alone.
  std::vector<bf16> routed(size_t(kRows) * kTopK * kHidden);
  int32_t dispatched = 0;
  for (int32_t slot = 0; slot < kRows * kTopK; ++slot) {
    const int32_t e = ids[size_t(slot)];
    if (e < 0) continue;
    ++dispatched;
    const std::vector<bf16> out =
        dense_mlp(f.w.experts[size_t(e)], &f.x[size_t(slot / kTopK) * kHidden], 1);
    std::copy(out.begin(), out.end(), routed.begin() + ptrdiff_t(slot) * kHidden);
  }
  EXPECT_EQ(dispatched, (kRows - 2) * kTopK);
  const std::vector<bf16> shared = dense_mlp(*f.w.shared, f.x.data(), kRows);
  std::vector<bf16> want(y.size());
  kernels::MoeCombineParams cp{routed.data(), ids.data(), g.data(), shared.data(),
                               want.data(),   kRows,      kTopK,    kHidden};
  ASSERT_TRUE(kernels::moe_combine_ref(cp).ok());
  float biggest = 0.f;  // the comparison means something only if the outputs are not all zero
  for (const bf16 v : want) biggest = std::max(biggest, std::fabs(bf16_to_float(v)));
  EXPECT_GT(biggest, 1e-3f);
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(y[i].bits, want[i].bits) << "row " << i / kHidden << " col " << i % kHidden << ": "
                                       << bf16_to_float(y[i]) << " vs " << bf16_to_float(want[i]);
  }
}

TEST(MoeFp8, MixedExpertWeightFormsAreRefused) {
  MoeFixture f;
  LinearWeight& up = f.w.experts[3].up;
  up.bf16_w.assign(up.fp8_w.size(), bf16{0});
  up.fp8_w.clear();
  up.scale_inv.clear();
  const Status s = f.store.add_expert_tables(f.w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("expert 3's up weight is bf16"), std::string::npos) << s.to_string();
  EXPECT_EQ(f.store.expert_tables(f.w), nullptr);
}

}  // namespace
}  // namespace dsa::model
