// GLM-5's config.json (docs/glm5.md): the real file (testdata/glm-5/config.json) loads and each
// GLM-5 key maps onto ModelConfig; transformers' spelling (mlp_layer_types, no moe_layer_freq,
// yarn in rope_parameters) loads too; what dsa does not run (IndexShare, interleaved dense
// layers, other RoPE kinds, attention bias) is refused with the key, the value and the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "dsa/model/fuzz_test_util.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_test_util.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::v32_config_json;

json glm5_config_json() {
  return json::parse(testing::read_bytes(testing::repo_path("testdata/glm-5/config.json")));
}

StatusOr<ModelConfig> parse(const json& j) { return parse_model_config(j.dump(), "config.json"); }

TEST(Glm5Config, RealConfigLoadsAndMaps) {
  StatusOr<ModelConfig> c = parse(glm5_config_json());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->is_glm5());
  EXPECT_EQ(c->architectures, std::vector<std::string>{"GlmMoeDsaForCausalLM"});
  EXPECT_EQ(c->model_type, "glm_moe_dsa");
  EXPECT_EQ(c->vocab_size, 154880);
  EXPECT_EQ(c->hidden_size, 6144);
  EXPECT_EQ(c->num_hidden_layers, 78);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->q_lora_rank, 2048);
  EXPECT_EQ(c->qk_nope_head_dim, 192);  // above V3.2's 128
  EXPECT_EQ(c->v_head_dim, 256);        // above V3.2's 128
  EXPECT_EQ(c->qk_head_dim(), 256);
  EXPECT_EQ(c->index_n_heads, 32);
  EXPECT_TRUE(c->indexer_rope_interleave);
  EXPECT_EQ(c->n_group, 1);
  EXPECT_EQ(c->topk_group, 1);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  // rope_parameters {rope_theta 1e6, rope_type "default"}: plain RoPE = factor 1, no mscale.
  EXPECT_EQ(c->rope_theta, 1000000.0);
  EXPECT_EQ(c->rope_scaling.type, "default");
  EXPECT_EQ(c->rope_scaling.factor, 1.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 202752);
  EXPECT_DOUBLE_EQ(c->sm_scale(), 1.0 / 16.0);  // 256^-1/2
  // No bos_token_id in GLM-5's config; eos is a list, the first is the tokenizer's EOS.
  EXPECT_FALSE(c->has_bos());
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->eos_token_id, 154820);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  // Three dense layers, then MoE; the MTP layer is layer 78, MoE.
  EXPECT_FALSE(c->is_moe_layer(2));
  EXPECT_TRUE(c->is_moe_layer(3));
  EXPECT_TRUE(c->has_mtp());
  EXPECT_EQ(c->mtp_layer_index(), 78);
  EXPECT_TRUE(c->is_moe_layer(c->mtp_layer_index()));
  EXPECT_FALSE(c->quantization_config.has_value());  // zai-org/GLM-5 is bf16
}

// transformers' GlmMoeDsaConfig writes mlp_layer_types and neither first_k_dense_replace nor
// moe_layer_freq, topk_method or scoring_func; its yarn lives in rope_parameters.
TEST(Glm5Config, TransformersSpellingLoads) {
  json j = glm5_config_json();
  for (const char* k : {"first_k_dense_replace", "moe_layer_freq", "topk_method", "scoring_func"}) {
    j.erase(k);
  }
  j["mlp_layer_types"] = json::array();
  for (int i = 0; i < 78; ++i) j["mlp_layer_types"].push_back(i < 3 ? "dense" : "sparse");
  j["indexer_types"] = json::array();
  for (int i = 0; i < 78; ++i) j["indexer_types"].push_back("full");
  j["index_topk_freq"] = 1;
  j["index_topk_pattern"] = nullptr;
  j["index_share_for_mtp_iteration"] = false;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000},
                          {"factor", 40},        {"original_max_position_embeddings", 4096},
                          {"beta_fast", 32},     {"beta_slow", 1},
                          {"mscale", 1.0},       {"mscale_all_dim", 1.0}};
  StatusOr<ModelConfig> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->first_k_dense_replace, 3);
  EXPECT_EQ(c->moe_layer_freq, 1);
  EXPECT_EQ(c->topk_method, "noaux_tc");
  EXPECT_EQ(c->scoring_func, "sigmoid");
  EXPECT_EQ(c->rope_scaling.type, "yarn");
  EXPECT_EQ(c->rope_scaling.factor, 40.0);
  EXPECT_EQ(c->rope_theta, 10000.0);
  // V3.2's sm_scale formula with GLM-5's qk 256.
  EXPECT_NEAR(c->sm_scale(), 1.8738542 / 16.0, 5e-8);
}

// The same rope_parameters spelling for a V3.2 config gives exactly what rope_scaling gives.
TEST(Glm5Config, V32RopeParametersEqualRopeScaling) {
  json j = v32_config_json();
  StatusOr<ModelConfig> a = parse(j);
  json rp = j["rope_scaling"];
  rp.erase("type");
  rp["rope_type"] = "yarn";
  rp["rope_theta"] = j["rope_theta"];
  j.erase("rope_scaling");
  j["rope_parameters"] = rp;
  StatusOr<ModelConfig> b = parse(j);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().to_string();
  EXPECT_EQ(a->rope_theta, b->rope_theta);
  EXPECT_EQ(a->rope_scaling.factor, b->rope_scaling.factor);
  EXPECT_EQ(a->rope_scaling.beta_fast, b->rope_scaling.beta_fast);
  EXPECT_EQ(a->rope_scaling.original_max_position_embeddings,
            b->rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a->sm_scale(), b->sm_scale());
}

TEST(Glm5Config, EosListForAnyConfig) {
  json j = v32_config_json();
  j["eos_token_id"] = {1, 7};
  StatusOr<ModelConfig> c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->eos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 7}));
  StatusOr<ModelConfig> one = parse(v32_config_json());
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->eos_token_ids, std::vector<int64_t>{1});
}

// A mutation of the real GLM-5 config, the code it must be refused with and its exact message.
struct Refusal {
  std::string name;
  std::function<void(json&)> mutate;
  StatusCode code;
  std::string message;  // after "config.json: "
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

class Glm5Refuses : public ::testing::TestWithParam<Refusal> {};

TEST_P(Glm5Refuses, NamingKeyAndValue) {
  json j = glm5_config_json();
  GetParam().mutate(j);
  StatusOr<ModelConfig> c = parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), GetParam().code) << c.status().to_string();
  EXPECT_EQ(c.status().message(), "config.json: " + GetParam().message);
}

template <typename T>
std::function<void(json&)> set_key(std::string key, T value) {
  return [key, value](json& j) { j[key] = value; };
}

// num_hidden_layers cut to 4 so the lists stay short.
std::function<void(json&)> four_layers(std::function<void(json&)> more) {
  return [more](json& j) {
    j["num_hidden_layers"] = 4;
    j["first_k_dense_replace"] = 1;
    more(j);
  };
}

const std::string kShare =
    "this layer reuses another layer's top-k (IndexShare, GLM-5.2 on), which is outside SPEC.md's "
    "scope (§8.1) and not implemented: dsa runs every layer's indexer, so it serves only configs "
    "whose layers are all \"full\"";

INSTANTIATE_TEST_SUITE_P(
    Keys, Glm5Refuses,
    ::testing::Values(
        Refusal{"SharedIndexer", four_layers([](json& j) {
                  j["indexer_types"] = {"full", "full", "full", "shared"};
                }),
                StatusCode::kUnimplemented, "indexer_types[3] = \"shared\": " + kShare},
        Refusal{"IndexerTypesLength", four_layers([](json& j) { j["indexer_types"] = {"full"}; }),
                StatusCode::kInvalidArgument,
                "indexer_types = [\"full\"]: must be an array of num_hidden_layers = 4 strings, "
                "each \"full\" or \"shared\""},
        Refusal{"SharedPattern", four_layers([](json& j) { j["index_topk_pattern"] = "FFSF"; }),
                StatusCode::kUnimplemented,
                "index_topk_pattern = \"FFSF\": layer 2 is 'S': " + kShare},
        Refusal{"SharedFrequency", four_layers([](json& j) {
                  j["index_topk_freq"] = 4;
                  j["index_skip_topk_offset"] = 3;
                }),
                StatusCode::kUnimplemented,
                "index_topk_freq = 4: with index_skip_topk_offset = 3, layer 3 is \"shared\": " +
                    kShare},
        Refusal{"ShareForMtp", set_key("index_share_for_mtp_iteration", true),
                StatusCode::kUnimplemented,
                "index_share_for_mtp_iteration = true: the MTP layer's draft steps would reuse the "
                "first step's top-k (IndexShare), which is not implemented: dsa runs the MTP "
                "layer's indexer on every draft step"},
        Refusal{"DenseAfterMoe", four_layers([](json& j) {
                  j.erase("first_k_dense_replace");
                  j["mlp_layer_types"] = {"dense", "sparse", "dense", "sparse"};
                }),
                StatusCode::kUnimplemented,
                "mlp_layer_types[2] = \"dense\": a dense layer after the MoE layer 1: dsa runs the "
                "first k layers dense and every later one MoE (SPEC.md §8.6)"},
        Refusal{"MlpTypeUnknown", four_layers([](json& j) {
                  j["mlp_layer_types"] = {"dense", "moe", "sparse", "sparse"};
                }),
                StatusCode::kInvalidArgument,
                "mlp_layer_types[1] = \"moe\": must be \"dense\" or \"sparse\""},
        Refusal{"MlpTypesDisagree", four_layers([](json& j) {
                  j["mlp_layer_types"] = {"dense", "dense", "sparse", "sparse"};
                }),
                StatusCode::kInvalidArgument,
                "first_k_dense_replace = 1: must equal the 2 leading \"dense\" entries of "
                "mlp_layer_types"},
        Refusal{"RopeTypeLinear", [](json& j) { j["rope_parameters"]["rope_type"] = "linear"; },
                StatusCode::kInvalidArgument,
                "rope_parameters.rope_type = \"linear\": unsupported; dsa implements \"default\" "
                "and \"yarn\""},
        Refusal{"RopeThetaMissing", [](json& j) { j["rope_parameters"].erase("rope_theta"); },
                StatusCode::kInvalidArgument, "rope_parameters.rope_theta: missing"},
        Refusal{"PartialRotary",
                [](json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.5; },
                StatusCode::kInvalidArgument,
                "rope_parameters.partial_rotary_factor = 0.5: must be 1 (all qk_rope_head_dim "
                "dims are rotated)"},
        Refusal{"RopeThetaTwice", set_key("rope_theta", 10000), StatusCode::kInvalidArgument,
                "rope_theta = 10000.0: must equal rope_parameters.rope_theta = 1000000.0 when "
                "both are given"},
        Refusal{"RopeScalingToo", set_key("rope_scaling", json{{"type", "yarn"}, {"factor", 40}}),
                StatusCode::kInvalidArgument,
                "rope_scaling = {\"factor\":40,\"type\":\"yarn\"}: must be absent or null when "
                "rope_parameters is given (dsa reads one of them)"},
        Refusal{"EosEmpty", set_key("eos_token_id", json::array()), StatusCode::kInvalidArgument,
                "eos_token_id = []: must be a token id or a non-empty array of token ids in [0, "
                "vocab_size = 154880) (at most 1024)"},
        Refusal{"EosBeyondVocab", set_key("eos_token_id", json{154820, 154880}),
                StatusCode::kInvalidArgument,
                "eos_token_id = [154820,154880]: must be a token id or a non-empty array of "
                "token ids in [0, vocab_size = 154880)"},
        Refusal{"AttentionBias", set_key("attention_bias", true), StatusCode::kUnimplemented,
                "attention_bias = true: dsa's attention projections have no bias (SPEC.md §8.2)"},
        Refusal{"RopeNotInterleaved", set_key("rope_interleave", false), StatusCode::kUnimplemented,
                "rope_interleave = false: dsa's MLA RoPE pairs (x[2i], x[2i+1]) (SPEC.md §8.3)"},
        Refusal{"QkHeadDim", set_key("qk_head_dim", 192), StatusCode::kInvalidArgument,
                "qk_head_dim = 192: must equal qk_nope_head_dim + qk_rope_head_dim = 256"},
        Refusal{"ModelTypeOfV32", set_key("model_type", "deepseek_v32"),
                StatusCode::kInvalidArgument,
                "model_type = \"deepseek_v32\": must be \"glm_moe_dsa\" (architectures names "
                "GlmMoeDsaForCausalLM)"},
        Refusal{"ArchitectureOfV32", set_key("architectures", json{"DeepseekV32ForCausalLM"}),
                StatusCode::kInvalidArgument,
                "architectures = [\"DeepseekV32ForCausalLM\"]: must be an array containing "
                "\"GlmMoeDsaForCausalLM\" (model_type is \"glm_moe_dsa\")"}),
    [](const ::testing::TestParamInfo<Refusal>& i) { return i.param.name; });

}  // namespace
}  // namespace dsa::model
