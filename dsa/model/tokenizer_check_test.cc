#include "dsa/model/tokenizer_check.h"

#include <gtest/gtest.h>

#include "dsa/model/byte_level.h"
#include "dsa/model/model_test_util.h"

namespace dsa::model {
namespace {

using nlohmann::json;

std::string repo(const std::string& path) { return std::string(DSA_SOURCE_DIR) + "/" + path; }

// Byte-level vocab (ids 0..255), no merges, BOS and EOS as added tokens at 256 and 257, plus any
// `extra` added tokens.
Tokenizer small_tokenizer(std::vector<std::pair<int32_t, std::string>> extra = {}) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(byte_level_char(static_cast<uint8_t>(b)))] = b;
  json added = json::array({{{"id", 256}, {"content", "<s>"}, {"special", true}},
                            {{"id", 257}, {"content", "</s>"}, {"special", true}}});
  for (const auto& [id, content] : extra) added.push_back({{"id", id}, {"content", content}});
  json j = {{"added_tokens", added},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  StatusOr<Tokenizer> t = Tokenizer::parse(j.dump(), "tokenizer.json");
  DSA_CHECK(t.ok());
  return std::move(t).value();
}

ModelConfig config_with(int64_t vocab, int64_t bos, int64_t eos) {
  json j = testing::tiny_config_json();
  j["vocab_size"] = vocab;
  j["bos_token_id"] = bos;
  j["eos_token_id"] = eos;
  StatusOr<ModelConfig> c = parse_model_config(j.dump(), "config.json");
  DSA_CHECK(c.ok());
  return std::move(c).value();
}

std::string rejection(const Tokenizer& t, const ModelConfig& c) {
  Status s = check_tokenizer_matches(t, c);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  return s.message();
}

TEST(TokenizerCheck, ShippedTinyModelMatches) {
  StatusOr<Tokenizer> t = Tokenizer::load(repo("models/tiny-dsa/tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  StatusOr<ModelConfig> c = load_model_config(repo("models/tiny-dsa/config.json"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(t->vocab_size(), c->vocab_size);
  Status s = check_tokenizer_matches(*t, *c);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(TokenizerCheck, EqualSizesAndSpecialIdsPass) {
  EXPECT_TRUE(check_tokenizer_matches(small_tokenizer(), config_with(258, 256, 257)).ok());
}

// A padded vocabulary (V3.2: 128,815 ids, vocab_size 129,280) loads; the padding is not sampled.
TEST(TokenizerCheck, FewerIdsThanTheVocabularyIsAPaddedVocabulary) {
  const Tokenizer t = small_tokenizer();
  const ModelConfig c = config_with(300, 256, 257);
  Status s = check_tokenizer_matches(t, c);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(sampleable_vocab(&t, c), 258);
  EXPECT_EQ(sampleable_vocab(nullptr, c), 300);
  EXPECT_EQ(sampleable_vocab(&t, config_with(258, 256, 257)), 258);
}

TEST(TokenizerCheck, MoreIdsThanTheVocabulary) {
  EXPECT_EQ(rejection(small_tokenizer(), config_with(200, 0, 1)),
            "tokenizer.json has 258 token ids (1 + its largest id), config.json vocab_size = 200: "
            "encode could give ids [200, 258) past the embedding's rows");
}

TEST(TokenizerCheck, HolesInTheIds) {
  Tokenizer t = small_tokenizer({{261, "<x>"}});  // 258, 259 and 260 name nothing
  EXPECT_EQ(rejection(t, config_with(262, 256, 257)),
            "tokenizer.json: 3 ids below its largest id 261 name no token (the first is 258): the "
            "model could sample them and they would not decode");
}

TEST(TokenizerCheck, SpecialIdsMustAgree) {
  EXPECT_EQ(rejection(small_tokenizer(), config_with(258, 5, 257)),
            "config.json: bos_token_id = 5, but tokenizer.json has its BOS token at id 256");
  EXPECT_EQ(rejection(small_tokenizer(), config_with(258, 256, 256)),
            "config.json: eos_token_id = 256, but tokenizer.json has its EOS token at id 257");
}

// GLM-5: no bos_token_id (nothing to check), an eos list whose ids all name tokens and which
// holds the tokenizer's own EOS.
TEST(TokenizerCheck, Glm5NoBosAndAnEosList) {
  json j = testing::tiny_config_json();
  j["model_type"] = "glm_moe_dsa";
  j["architectures"] = {"GlmMoeDsaForCausalLM"};
  j["vocab_size"] = 258;
  j.erase("bos_token_id");
  j["eos_token_id"] = {257, 5};
  StatusOr<ModelConfig> c = parse_model_config(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(check_tokenizer_matches(small_tokenizer(), *c).ok());
  Tokenizer t = small_tokenizer();
  ASSERT_TRUE(t.set_special_ids(int32_t(c->bos_token_id), int32_t(c->eos_token_id)).ok());
  EXPECT_EQ(t.bos_id(), -1);
  EXPECT_EQ(t.encode("a", /*add_bos=*/true), t.encode("a"));  // nothing prepended
  j["eos_token_id"] = {5, 6};
  c = parse_model_config(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(rejection(small_tokenizer(), *c),
            "config.json: eos_token_id lists none of tokenizer.json's EOS token at id 257");
}

}  // namespace
}  // namespace dsa::model
