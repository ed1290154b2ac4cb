#include "dsa/model/model_tensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "dsa/model/model_test_util.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::FakeTensor;
using testing::safetensors_bytes;
using testing::TempDir;
using testing::write_file;

ModelConfig parse(const json& j) {
  StatusOr<ModelConfig> c = parse_model_config(j.dump(), "config.json");
  DSA_CHECK(c.ok());
  return *c;
}

std::map<std::string, ExpectedTensor> by_name(const ModelConfig& c) {
  std::map<std::string, ExpectedTensor> m;
  for (ExpectedTensor& x : expected_model_tensors(c)) m.emplace(x.name, x);
  return m;
}

// SPEC.md §8.7: 19,251,088 parameters with the MTP layer's own embed_tokens and shared_head.head,
// 16,105,360 without them. An independent total over the whole inventory.
TEST(ModelTensors, TinyInventoryMatchesSpecParameterCount) {
  int64_t all = 0, required = 0;
  for (const ExpectedTensor& x : expected_model_tensors(parse(testing::tiny_config_json()))) {
    all += shape_numel(x.shape);
    if (!x.optional) required += shape_numel(x.shape);
  }
  EXPECT_EQ(all, 19251088);
  EXPECT_EQ(required, 16105360);
}

TEST(ModelTensors, TinyInventoryLayout) {
  auto m = by_name(parse(testing::tiny_config_json()));
  auto shape = [&](const std::string& n) { return m.count(n) ? m.at(n).shape : Shape{-1}; };
  // Layer 0 dense, layers 1..3 and the MTP layer 4 MoE with 4 experts and a shared expert.
  EXPECT_EQ(shape("model.layers.0.mlp.gate_proj.weight"), (Shape{768, 256}));
  EXPECT_EQ(m.count("model.layers.0.mlp.gate.weight"), 0u);
  EXPECT_EQ(m.count("model.layers.1.mlp.gate_proj.weight"), 0u);
  EXPECT_EQ(shape("model.layers.1.mlp.experts.3.down_proj.weight"), (Shape{256, 128}));
  EXPECT_EQ(m.count("model.layers.1.mlp.experts.4.down_proj.weight"), 0u);
  EXPECT_EQ(shape("model.layers.3.mlp.shared_experts.up_proj.weight"), (Shape{128, 256}));
  EXPECT_EQ(m.at("model.layers.2.mlp.gate.e_score_correction_bias").kind, TensorKind::kF32);
  EXPECT_EQ(shape("model.layers.4.mlp.experts.0.gate_proj.weight"), (Shape{128, 256}));
  EXPECT_EQ(shape("model.layers.4.self_attn.indexer.wq_b.weight"), (Shape{16 * 128, 128}));
  EXPECT_EQ(shape("model.layers.4.eh_proj.weight"), (Shape{256, 512}));
  EXPECT_EQ(shape("model.layers.4.shared_head.norm.weight"), (Shape{256}));
  EXPECT_TRUE(m.at("model.layers.4.embed_tokens.weight").optional);
  EXPECT_TRUE(m.at("model.layers.4.shared_head.head.weight").optional);
  EXPECT_EQ(m.count("model.layers.5.input_layernorm.weight"), 0u);
  EXPECT_EQ(m.count("model.layers.3.enorm.weight"), 0u);
}

// The V3.2 column of SPEC.md §8.2, row by row.
TEST(ModelTensors, V32InventoryMatchesSpecTable) {
  auto m = by_name(parse(testing::v32_config_json()));
  const std::string l = "model.layers.5.";
  const std::vector<std::pair<std::string, Shape>> rows = {
      {"model.embed_tokens.weight", {129280, 7168}},
      {"lm_head.weight", {129280, 7168}},
      {"model.norm.weight", {7168}},
      {l + "input_layernorm.weight", {7168}},
      {l + "post_attention_layernorm.weight", {7168}},
      {l + "self_attn.q_a_proj.weight", {1536, 7168}},
      {l + "self_attn.q_a_layernorm.weight", {1536}},
      {l + "self_attn.q_b_proj.weight", {128 * 192, 1536}},
      {l + "self_attn.kv_a_proj_with_mqa.weight", {576, 7168}},
      {l + "self_attn.kv_a_layernorm.weight", {512}},
      {l + "self_attn.kv_b_proj.weight", {128 * 256, 512}},
      {l + "self_attn.o_proj.weight", {7168, 128 * 128}},
      {l + "self_attn.indexer.wq_b.weight", {64 * 128, 1536}},
      {l + "self_attn.indexer.wk.weight", {128, 7168}},
      {l + "self_attn.indexer.k_norm.weight", {128}},
      {l + "self_attn.indexer.k_norm.bias", {128}},
      {l + "self_attn.indexer.weights_proj.weight", {64, 7168}},
      {"model.layers.2.mlp.gate_proj.weight", {18432, 7168}},
      {"model.layers.2.mlp.up_proj.weight", {18432, 7168}},
      {"model.layers.2.mlp.down_proj.weight", {7168, 18432}},
      {l + "mlp.gate.weight", {256, 7168}},
      {l + "mlp.gate.e_score_correction_bias", {256}},
      {l + "mlp.experts.255.gate_proj.weight", {2048, 7168}},
      {l + "mlp.experts.255.up_proj.weight", {2048, 7168}},
      {l + "mlp.experts.255.down_proj.weight", {7168, 2048}},
      {l + "mlp.shared_experts.gate_proj.weight", {2048, 7168}},
      {l + "mlp.shared_experts.down_proj.weight", {7168, 2048}},
      {"model.layers.61.enorm.weight", {7168}},
      {"model.layers.61.hnorm.weight", {7168}},
      {"model.layers.61.eh_proj.weight", {7168, 14336}},
      {"model.layers.61.shared_head.norm.weight", {7168}},
      {"model.layers.61.shared_head.head.weight", {129280, 7168}},
      {"model.layers.61.embed_tokens.weight", {129280, 7168}},
      {"model.layers.61.self_attn.indexer.wk.weight", {128, 7168}},
      {"model.layers.61.mlp.experts.0.up_proj.weight", {2048, 7168}},
  };
  for (const auto& [name, shape] : rows) {
    ASSERT_EQ(m.count(name), 1u) << name;
    EXPECT_EQ(m.at(name).shape, shape) << name;
  }
  EXPECT_EQ(m.count("model.layers.3.mlp.gate_proj.weight"), 0u);
  EXPECT_EQ(m.count("model.layers.62.enorm.weight"), 0u);
  EXPECT_EQ(m.at(l + "self_attn.indexer.weights_proj.weight").kind, TensorKind::kMatrix);
  EXPECT_EQ(m.at(l + "mlp.gate.weight").kind, TensorKind::kMatrix);
  EXPECT_EQ(m.at(l + "self_attn.kv_b_proj.weight").kind, TensorKind::kLinear);
}

// A small config (real kernel widths, everything else shrunk) so fixtures stay a few MB.
json mini_config_json() {
  json j = testing::tiny_config_json();
  j.update({{"vocab_size", 300},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"moe_intermediate_size", 32},
            {"num_hidden_layers", 2},
            {"q_lora_rank", 32},
            {"qk_nope_head_dim", 16},
            {"v_head_dim", 16}});
  return j;
}

// Every tensor of the inventory with its plain dtype (bf16, f32 for the router bias).
std::vector<FakeTensor> checkpoint(const ModelConfig& c) {
  std::vector<FakeTensor> out;
  for (const ExpectedTensor& x : expected_model_tensors(c)) {
    const bool f32 = x.kind == TensorKind::kF32;
    out.push_back({x.name, f32 ? "F32" : "BF16", x.shape, f32 ? 4u : 2u, 0x3C});
  }
  return out;
}

void put(std::vector<FakeTensor>& ts, FakeTensor t) {
  auto it =
      std::find_if(ts.begin(), ts.end(), [&](const FakeTensor& x) { return x.name == t.name; });
  if (it == ts.end()) {
    ts.push_back(std::move(t));
  } else {
    *it = std::move(t);
  }
}

void drop(std::vector<FakeTensor>& ts, const std::string& name) {
  auto it = std::find_if(ts.begin(), ts.end(), [&](const FakeTensor& x) { return x.name == name; });
  DSA_CHECK(it != ts.end());
  ts.erase(it);
}

// Writes `ts`, opens it and runs the check; `path` receives the file for message comparisons.
Status check(const std::vector<FakeTensor>& ts, const ModelConfig& c, TempDir& dir,
             std::string* path) {
  auto p = write_file(dir / "model.safetensors", safetensors_bytes(ts));
  *path = p.string();
  StatusOr<Checkpoint> f = Checkpoint::open_file(p);
  DSA_CHECK(f.ok());
  return check_model_tensors(*f, c);
}

const std::string kKvB = "model.layers.0.self_attn.kv_b_proj.weight";  // [16 * 32, 512]

TEST(ModelTensors, AcceptsCompleteBf16Checkpoint) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  Status s = check(checkpoint(c), c, dir, &path);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ModelTensors, MtpCopiesAreOptional) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  drop(ts, "model.layers.2.embed_tokens.weight");
  drop(ts, "model.layers.2.shared_head.head.weight");
  Status s = check(ts, c, dir, &path);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ModelTensors, NormsMayBeStoredAsF32) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  put(ts, {"model.layers.1.input_layernorm.weight", "F32", {64}, 4});
  put(ts, {"model.layers.1.self_attn.indexer.k_norm.bias", "F32", {128}, 4});
  Status s = check(ts, c, dir, &path);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ModelTensors, RejectsMissingTensor) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  drop(ts, "model.layers.1.mlp.experts.3.up_proj.weight");
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), path + ": tensor model.layers.1.mlp.experts.3.up_proj.weight not found");
}

TEST(ModelTensors, RejectsMissingMtpBlock) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  drop(ts, "model.layers.2.hnorm.weight");
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), path + ": tensor model.layers.2.hnorm.weight not found");
}

TEST(ModelTensors, RejectsMisShapedTensor) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  put(ts, {kKvB, "BF16", {512, 511}});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": " + kKvB + ": expected bf16 [512, 512], got bf16 [512, 511]");
}

TEST(ModelTensors, RejectsBf16RouterBias) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  put(ts, {"model.layers.1.mlp.gate.e_score_correction_bias", "BF16", {4}});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path +
                             ": model.layers.1.mlp.gate.e_score_correction_bias: expected f32 "
                             "[4], got bf16 [4]");
}

TEST(ModelTensors, RejectsUnexpectedTensor) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  put(ts, {"model.layers.1.mlp.experts.4.up_proj.weight", "BF16", {32, 64}});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path +
                             ": model.layers.1.mlp.experts.4.up_proj.weight: unexpected tensor "
                             "(not in SPEC §8.2 for this config.json)");
}

TEST(ModelTensors, RejectsFp8WithoutQuantizationConfig) {
  TempDir dir;
  std::string path;
  ModelConfig c = parse(mini_config_json());
  auto ts = checkpoint(c);
  put(ts, {kKvB, "F8_E4M3", {512, 512}, 1});
  put(ts, {kKvB + "_scale_inv", "F32", {4, 4}, 4});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": " + kKvB + ": expected bf16 [512, 512], got e4m3 [512, 512]");
}

ModelConfig quantized_mini() {
  json j = mini_config_json();
  j["quantization_config"] = testing::v32_config_json()["quantization_config"];
  return parse(j);
}

TEST(ModelTensors, AcceptsFp8WeightsWithScales) {
  TempDir dir;
  std::string path;
  ModelConfig c = quantized_mini();
  auto ts = checkpoint(c);  // bf16 linears stay allowed next to FP8 ones
  put(ts, {kKvB, "F8_E4M3", {512, 512}, 1});
  put(ts, {kKvB + "_scale_inv", "F32", {4, 4}, 4});
  // [32, 64]: both dims below one block still get one scale each way (ceil).
  put(ts, {"model.layers.1.self_attn.q_a_proj.weight", "F8_E4M3", {32, 64}, 1});
  put(ts, {"model.layers.1.self_attn.q_a_proj.weight_scale_inv", "F32", {1, 1}, 4});
  // o_proj [64, 256] -> scales [1, 2].
  put(ts, {"model.layers.2.self_attn.o_proj.weight", "F8_E4M3", {64, 256}, 1});
  put(ts, {"model.layers.2.self_attn.o_proj.weight_scale_inv", "F32", {1, 2}, 4});
  Status s = check(ts, c, dir, &path);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// The same checks through a sharded checkpoint: each FP8 weight's scale in the other shard.
Status check_sharded(const std::vector<FakeTensor>& ts, const ModelConfig& c, TempDir& dir) {
  std::vector<FakeTensor> a, b;
  nlohmann::json map = nlohmann::json::object();
  for (const FakeTensor& t : ts) {
    const bool scale = t.name.ends_with("_scale_inv");
    (scale ? b : a).push_back(t);
    map[t.name] = scale ? "model-00002-of-000002.safetensors" : "model-00001-of-000002.safetensors";
  }
  write_file(dir / "model-00001-of-000002.safetensors", safetensors_bytes(a));
  write_file(dir / "model-00002-of-000002.safetensors", safetensors_bytes(b));
  write_file(dir / "model.safetensors.index.json",
             nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump());
  StatusOr<Checkpoint> f = Checkpoint::open(dir / "");
  if (!f.ok()) return f.status();
  return check_model_tensors(*f, c);
}

TEST(ModelTensors, Fp8ScalesInAnotherShard) {
  TempDir dir;
  ModelConfig c = quantized_mini();
  auto ts = checkpoint(c);
  put(ts, {kKvB, "F8_E4M3", {512, 512}, 1});
  put(ts, {kKvB + "_scale_inv", "F32", {4, 4}, 4});
  Status s = check_sharded(ts, c, dir);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ModelTensors, ShardedMessagesNameTheTensorsShard) {
  TempDir dir;
  ModelConfig c = quantized_mini();
  auto ts = checkpoint(c);
  put(ts, {kKvB, "F8_E4M3", {512, 512}, 1});
  put(ts, {kKvB + "_scale_inv", "F32", {4, 3}, 4});  // wrong scale shape
  Status s = check_sharded(ts, c, dir);
  EXPECT_NE(s.message().find("model-00002-of-000002.safetensors: " + kKvB + "_scale_inv"),
            std::string::npos)
      << s.to_string();
  TempDir dir2;
  ts = checkpoint(c);
  put(ts, {kKvB, "F8_E4M3", {512, 512}, 1});  // no scale anywhere
  s = check_sharded(ts, c, dir2);
  EXPECT_EQ(s.message(), (dir2 / "model-00001-of-000002.safetensors").string() + ": " + kKvB +
                             ": e4m3 weight without " + kKvB + "_scale_inv");
}

TEST(ModelTensors, RejectsFp8WithoutScale) {
  TempDir dir;
  std::string path;
  ModelConfig c = quantized_mini();
  auto ts = checkpoint(c);
  put(ts, {kKvB, "F8_E4M3", {512, 512}, 1});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": " + kKvB + ": e4m3 weight without " + kKvB + "_scale_inv");
}

TEST(ModelTensors, RejectsMisShapedScale) {
  TempDir dir;
  std::string path;
  ModelConfig c = quantized_mini();
  auto ts = checkpoint(c);
  put(ts, {kKvB, "F8_E4M3", {512, 512}, 1});
  put(ts, {kKvB + "_scale_inv", "F32", {4, 5}, 4});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": " + kKvB + "_scale_inv: expected f32 [4, 4], got f32 [4, 5]");
}

TEST(ModelTensors, RejectsScaleOnBf16Weight) {
  TempDir dir;
  std::string path;
  ModelConfig c = quantized_mini();
  auto ts = checkpoint(c);
  put(ts, {kKvB + "_scale_inv", "F32", {4, 4}, 4});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": " + kKvB +
                             "_scale_inv: unexpected tensor (not in SPEC §8.2 for this "
                             "config.json)");
}

TEST(ModelTensors, RejectsFp8OnNeverQuantizedTensor) {
  TempDir dir;
  std::string path;
  ModelConfig c = quantized_mini();
  auto ts = checkpoint(c);
  const std::string wp = "model.layers.0.self_attn.indexer.weights_proj.weight";
  put(ts, {wp, "F8_E4M3", {16, 64}, 1});
  put(ts, {wp + "_scale_inv", "F32", {1, 1}, 4});
  Status s = check(ts, c, dir, &path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": " + wp + ": expected bf16 [16, 64], got e4m3 [16, 64]");
}

TEST(ModelTensors, NoMtpLayerWhenConfigHasNone) {
  json j = mini_config_json();
  j["num_nextn_predict_layers"] = 0;
  auto m = by_name(parse(j));
  EXPECT_EQ(m.count("model.layers.2.enorm.weight"), 0u);
  EXPECT_EQ(m.count("model.layers.2.input_layernorm.weight"), 0u);
  EXPECT_EQ(m.count("model.layers.1.input_layernorm.weight"), 1u);
}

}  // namespace
}  // namespace dsa::model
