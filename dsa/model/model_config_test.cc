#include "dsa/model/model_config.h"

#include <gtest/gtest.h>

#include <functional>

#include "dsa/model/model_test_util.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::tiny_config_json;
using testing::v32_config_json;
using testing::write_file;

TEST(ModelConfig, TinyConfigLoadsFromFile) {
  TempDir dir;
  auto path = write_file(dir / "config.json", tiny_config_json().dump(2));
  StatusOr<ModelConfig> c = load_model_config(path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->architectures, std::vector<std::string>{"DeepseekV32ForCausalLM"});
  EXPECT_EQ(c->vocab_size, 6144);
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->q_lora_rank, 128);
  EXPECT_EQ(c->qk_head_dim(), 128);
  EXPECT_EQ(c->index_topk, 128);
  EXPECT_FALSE(c->indexer_rope_interleave);  // absent = false
  EXPECT_EQ(c->rope_scaling.type, "yarn");
  EXPECT_EQ(c->rope_scaling.factor, 40.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_FALSE(c->quantization_config.has_value());
  // Layer 0 dense, layers >= 1 and the MTP layer (index 4) MoE (SPEC.md §8.7).
  EXPECT_FALSE(c->is_moe_layer(0));
  EXPECT_TRUE(c->is_moe_layer(1));
  EXPECT_TRUE(c->is_moe_layer(3));
  EXPECT_TRUE(c->has_mtp());
  EXPECT_EQ(c->mtp_layer_index(), 4);
  EXPECT_TRUE(c->is_moe_layer(c->mtp_layer_index()));
}

// SPEC.md §8.3: 128^-1/2 * 1.8738542 = 0.1656269 (tiny) and 0.1352338 (V3.2, qk 192).
TEST(ModelConfig, SmScaleMatchesSpec) {
  StatusOr<ModelConfig> tiny = parse_model_config(tiny_config_json().dump(), "config.json");
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  EXPECT_NEAR(tiny->sm_scale(), 0.1656269, 5e-8);
  StatusOr<ModelConfig> v32 = parse_model_config(v32_config_json().dump(), "config.json");
  ASSERT_TRUE(v32.ok()) << v32.status().to_string();
  EXPECT_NEAR(v32->sm_scale(), 0.1352338, 5e-8);
}

TEST(ModelConfig, V32ConfigWithQuantization) {
  StatusOr<ModelConfig> c = parse_model_config(v32_config_json().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_hidden_layers, 61);
  EXPECT_FALSE(c->is_moe_layer(2));
  EXPECT_TRUE(c->is_moe_layer(3));
  ASSERT_TRUE(c->quantization_config.has_value());
  EXPECT_EQ(c->quantization_config->quant_method, "fp8");
  EXPECT_EQ(c->quantization_config->fmt, "e4m3");
  EXPECT_EQ(c->quantization_config->weight_block_size[0], 128);
  EXPECT_EQ(c->quantization_config->weight_block_size[1], 128);
  EXPECT_EQ(c->quantization_config->activation_scheme, "dynamic");
  EXPECT_EQ(c->quantization_config->scale_fmt, "ue8m0");
}

TEST(ModelConfig, OptionalKeys) {
  json j = v32_config_json();
  j["quantization_config"].erase("scale_fmt");
  j["indexer_rope_interleave"] = true;
  j["rope_scaling"].erase("type");
  j["rope_scaling"]["rope_type"] = "yarn";  // the newer HF spelling
  StatusOr<ModelConfig> c = parse_model_config(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->quantization_config->scale_fmt, "");
  EXPECT_TRUE(c->indexer_rope_interleave);
}

// GLM-5 configs load: glm5_config_test.cc.

// testdata/deepseek-v3.2/config.json (the cli_checkpoint base) holds the real V3.2 values and
// loads.
TEST(ModelConfig, TestdataV32Config) {
  StatusOr<ModelConfig> c = load_model_config(std::filesystem::path(DSA_SOURCE_DIR) / "testdata" /
                                              "deepseek-v3.2" / "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->hidden_size, 7168);
  EXPECT_EQ(c->num_hidden_layers, 61);
  EXPECT_EQ(c->n_routed_experts, 256);
  EXPECT_EQ(c->index_topk, 2048);
  EXPECT_TRUE(c->has_mtp());
  EXPECT_TRUE(c->quantization_config.has_value());
}

TEST(ModelConfig, MissingFileIsNotFound) {
  TempDir dir;
  StatusOr<ModelConfig> c = load_model_config(dir / "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("config.json: cannot open"), std::string::npos)
      << c.status().message();
}

TEST(ModelConfig, NotJsonReportsParserPosition) {
  TempDir dir;
  auto path = write_file(dir / "config.json", "{\n  \"vocab_size\": 6144,\n  oops\n}");
  StatusOr<ModelConfig> c = load_model_config(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = c.status().message();
  EXPECT_EQ(m.rfind(path.string() + ": not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("line 3, column 3"), std::string::npos) << m;
}

TEST(ModelConfig, TopLevelMustBeObject) {
  StatusOr<ModelConfig> c = parse_model_config("[1, 2]", "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "config.json: top level must be a JSON object");
}

// One rejection per case: a mutation of the tiny config and the exact message it must produce.
struct BadCase {
  std::string name;
  std::function<void(json&)> mutate;
  std::string message;  // after "config.json: "
};

// Names the case in gtest's listings instead of dumping the object's bytes.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class ModelConfigRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelConfigRejects, WithKeyAndValue) {
  json j = tiny_config_json();
  GetParam().mutate(j);
  StatusOr<ModelConfig> c = parse_model_config(j.dump(), "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "config.json: " + GetParam().message);
}

template <typename T>
std::function<void(json&)> set(std::string key, T value) {
  return [key, value](json& j) { j[key] = value; };
}
template <typename T>
std::function<void(json&)> set_in(std::string obj, std::string key, T value) {
  return [obj, key, value](json& j) { j[obj][key] = value; };
}
std::function<void(json&)> erase(std::string key) {
  return [key](json& j) { j.erase(key); };
}
json v32_quantization() { return v32_config_json()["quantization_config"]; }

INSTANTIATE_TEST_SUITE_P(
    Keys, ModelConfigRejects,
    ::testing::Values(
        BadCase{"IndexTopkNotMultiple", set("index_topk", 100),
                "index_topk = 100: must be a multiple of 64 in [64, 2048]"},
        BadCase{"IndexTopkTooLarge", set("index_topk", 4096),
                "index_topk = 4096: must be a multiple of 64 in [64, 2048]"},
        BadCase{"IndexTopkZero", set("index_topk", 0),
                "index_topk = 0: must be a multiple of 64 in [64, 2048]"},
        BadCase{"KvLoraRank", set("kv_lora_rank", 256), "kv_lora_rank = 256: must be 512"},
        BadCase{"QkRopeHeadDim", set("qk_rope_head_dim", 32), "qk_rope_head_dim = 32: must be 64"},
        BadCase{"IndexHeadDim", set("index_head_dim", 64), "index_head_dim = 64: must be 128"},
        BadCase{"IndexNHeads", set("index_n_heads", 8), "index_n_heads = 8: must be 16, 32 or 64"},
        BadCase{"NumAttentionHeads", set("num_attention_heads", 8),
                "num_attention_heads = 8: must be 16, 32, 64 or 128"},
        BadCase{"NumKeyValueHeads", set("num_key_value_heads", 1),
                "num_key_value_heads = 1: must equal num_attention_heads = 16"},
        BadCase{"ExpertsNotDivisibleByGroups", set("n_routed_experts", 5),
                "n_routed_experts = 5: must be divisible by n_group = 2 with at least 2 experts "
                "per group"},
        BadCase{"TopkGroupAboveNGroup", set("topk_group", 3),
                "topk_group = 3: must be in [1, n_group = 2]"},
        BadCase{"ExpertsPerTokAboveKeptGroups", set("num_experts_per_tok", 3),
                "num_experts_per_tok = 3: must be in [1, topk_group * n_routed_experts / n_group "
                "= 2] (and so <= n_routed_experts)"},
        BadCase{"TopkMethod", set("topk_method", "greedy"),
                "topk_method = \"greedy\": unsupported; only \"noaux_tc\" is implemented"},
        BadCase{"ScoringFunc", set("scoring_func", "softmax"),
                "scoring_func = \"softmax\": unsupported; only \"sigmoid\" is implemented"},
        BadCase{"HiddenSizeZero", set("hidden_size", 0),
                "hidden_size = 0: must be in [1, 32768]"},
        BadCase{"HiddenSizeNotMultipleOf8", set("hidden_size", 260),
                "hidden_size = 260: must be a multiple of 8 (the expert GEMM loads 16-byte rows)"},
        BadCase{"MoeWidthNotMultipleOf8", set("moe_intermediate_size", 100),
                "moe_intermediate_size = 100: must be a multiple of 8 (the expert GEMM loads "
                "16-byte rows)"},
        BadCase{"VocabNegative", set("vocab_size", -6144),
                "vocab_size = -6144: must be in [1, 1048576]"},
        BadCase{"VocabHuge", set("vocab_size", int64_t{1} << 31),
                "vocab_size = 2147483648: must be in [1, 1048576]"},
        BadCase{"LayersHuge", set("num_hidden_layers", int64_t{1000000000000}),
                "num_hidden_layers = 1000000000000: must be in [1, 256]"},
        BadCase{"LayersAsFloat", set("num_hidden_layers", 1e12),
                "num_hidden_layers = 1000000000000.0: must be an integer"},
        BadCase{"Layers2To63", set("num_hidden_layers", uint64_t{1} << 63),
                "num_hidden_layers = 9223372036854775808: must be in [1, 256]"},
        BadCase{"ExpertsHuge", set("n_routed_experts", int64_t{1} << 31),
                "n_routed_experts = 2147483648: must be in [2, 512]"},
        BadCase{"OneExpert", set("n_routed_experts", 1), "n_routed_experts = 1: must be in [2, 512]"},
        BadCase{"SharedExpertsHuge", set("n_shared_experts", 65),
                "n_shared_experts = 65: must be in [0, 64]"},
        BadCase{"SharedExpertsWidth",
                [](json& j) {
                  j["n_shared_experts"] = 64;
                  j["moe_intermediate_size"] = 8192;
                },
                "n_shared_experts * moe_intermediate_size = 64 * 8192: must be <= 262144"},
        BadCase{"NGroupAboveExperts", set("n_group", 5), "n_group = 5: must be in [1, "
                                                         "n_routed_experts = 4]"},
        BadCase{"HeadDimHuge", set("qk_nope_head_dim", 1 << 20),
                "qk_nope_head_dim = 1048576: must be in [1, 1024]"},
        BadCase{"StackedHeadsAtTheCaps",
                [](json& j) {
                  j["num_attention_heads"] = j["num_key_value_heads"] = 128;
                  j["qk_nope_head_dim"] = j["v_head_dim"] = 1025;
                },
                "qk_nope_head_dim = 1025: must be in [1, 1024]"},
        BadCase{"PositionsHuge", set("max_position_embeddings", int64_t{1} << 40),
                "max_position_embeddings = 1099511627776: must be in [1, 1048576]"},
        BadCase{"OriginalPositionsNegative",
                set_in("rope_scaling", "original_max_position_embeddings", -1),
                "rope_scaling.original_max_position_embeddings = -1: must be in [1, 1048576]"},
        BadCase{"EpsZero", set("rms_norm_eps", 0.0),
                "rms_norm_eps = 0.0: must be in [1.17549435e-38, 1) (a normal fp32 below 1)"},
        BadCase{"EpsBelowFp32", set("rms_norm_eps", 1e-40),
                "rms_norm_eps = 1e-40: must be in [1.17549435e-38, 1) (a normal fp32 below 1)"},
        BadCase{"ScalingBeyondFp32", set("routed_scaling_factor", 1e39),
                "routed_scaling_factor = 1e+39: must be > 0 and a finite fp32"},
        BadCase{"RopeTypesDisagree",
                [](json& j) { j["rope_scaling"]["rope_type"] = "linear"; },
                "rope_scaling.rope_type = \"linear\": must equal type = \"yarn\""},
        BadCase{"SmScaleOverflowsFp32",
                [](json& j) { j["rope_scaling"]["mscale"] = j["rope_scaling"]["mscale_all_dim"] =
                                  1e300; },
                "rope_scaling: sm_scale = (0.1 * mscale_all_dim * ln(factor) + 1)^2 / "
                "sqrt(qk_nope_head_dim + qk_rope_head_dim) = inf: must be a finite fp32"},
        BadCase{"ModelType", set("model_type", "deepseek_v3"),
                "model_type = \"deepseek_v3\": must be \"deepseek_v32\""},
        BadCase{"Architectures", set("architectures", json::array({"DeepseekV3ForCausalLM"})),
                "architectures = [\"DeepseekV3ForCausalLM\"]: must be an array containing "
                "\"DeepseekV32ForCausalLM\""},
        BadCase{"IntAsString", set("hidden_size", "256"),
                "hidden_size = \"256\": must be an integer"},
        BadCase{"IntWithFraction", set("hidden_size", 256.5),
                "hidden_size = 256.5: must be an integer"},
        BadCase{"BoolAsInt", set("norm_topk_prob", 1), "norm_topk_prob = 1: must be true or false"},
        BadCase{"NumberAsString", set("rms_norm_eps", "1e-6"),
                "rms_norm_eps = \"1e-6\": must be a number"},
        BadCase{"InterleaveNotBool", set("indexer_rope_interleave", "no"),
                "indexer_rope_interleave = \"no\": must be true or false"},
        BadCase{"MissingVocab", erase("vocab_size"), "vocab_size: missing"},
        BadCase{"MissingRopeScaling", erase("rope_scaling"), "rope_scaling: missing"},
        BadCase{"RopeScalingNotObject", set("rope_scaling", 40),
                "rope_scaling = 40: must be an object"},
        BadCase{"RopeScalingType", set_in("rope_scaling", "type", "linear"),
                "rope_scaling.type = \"linear\": unsupported; only \"yarn\" is implemented"},
        BadCase{"RopeScalingFactor", set_in("rope_scaling", "factor", 0.5),
                "rope_scaling.factor = 0.5: must be >= 1"},
        BadCase{"RopeScalingMissingBeta", [](json& j) { j["rope_scaling"].erase("beta_fast"); },
                "rope_scaling.beta_fast: missing"},
        BadCase{"RopeScalingBetaOrder", set_in("rope_scaling", "beta_fast", 0.5),
                "rope_scaling.beta_fast = 0.5: must be > beta_slow = 1.0"},
        BadCase{"RopeScalingMscale", set_in("rope_scaling", "mscale", 0.707),
                "rope_scaling.mscale = 0.707: must equal mscale_all_dim = 1.0 (cos/sin are not "
                "rescaled, SPEC §8.3)"},
        BadCase{"BosBeyondVocab", set("bos_token_id", 6144),
                "bos_token_id = 6144: must be a token id in [0, vocab_size = 6144)"},
        BadCase{"EosNegative", set("eos_token_id", -1),
                "eos_token_id = -1: must be a token id in [0, vocab_size = 6144)"},
        BadCase{"MoeLayerFreq", set("moe_layer_freq", 2),
                "moe_layer_freq = 2: must be 1 (every layer from first_k_dense_replace is MoE)"},
        BadCase{"NextnLayers", set("num_nextn_predict_layers", 2),
                "num_nextn_predict_layers = 2: must be 0 or 1 (one MTP layer, SPEC §6.5)"},
        BadCase{"FirstKDense", set("first_k_dense_replace", 5),
                "first_k_dense_replace = 5: must be in [0, num_hidden_layers = 4]"},
        BadCase{"TiedEmbeddings", set("tie_word_embeddings", true),
                "tie_word_embeddings = true: must be false (SPEC §8.2)"},
        BadCase{"QuantBlockSize",
                [](json& j) {
                  j["quantization_config"] = v32_quantization();
                  j["quantization_config"]["weight_block_size"] = {64, 64};
                },
                "quantization_config.weight_block_size = [64,64]: must be [128, 128]"},
        BadCase{"QuantMethod",
                [](json& j) {
                  j["quantization_config"] = v32_quantization();
                  j["quantization_config"]["quant_method"] = "gptq";
                },
                "quantization_config.quant_method = \"gptq\": unsupported; only \"fp8\" is "
                "implemented"},
        BadCase{"QuantScaleFmt",
                [](json& j) {
                  j["quantization_config"] = v32_quantization();
                  j["quantization_config"]["scale_fmt"] = "fp32";
                },
                "quantization_config.scale_fmt = \"fp32\": must be \"ue8m0\" when present"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

}  // namespace
}  // namespace dsa::model
