// A padded vocabulary (model/tokenizer_check.h): with a tokenizer of fewer ids than the model's
// vocab_size, the engine never samples, drafts or emits an id past the tokenizer's, and
// speculative decoding stays lossless under the mask.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dsa/engine/engine_test_util.h"
#include "dsa/model/byte_level.h"

namespace dsa::engine {
namespace {

using nlohmann::json;

// Byte-level ids 0..255 plus <s>, </s> at 256, 257: 258 ids against the tiny model's 6144.
model::Tokenizer byte_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[std::string(model::byte_level_char(static_cast<uint8_t>(b)))] = b;
  }
  json added = json::array({{{"id", 256}, {"content", "<s>"}, {"special", true}},
                            {{"id", 257}, {"content", "</s>"}, {"special", true}}});
  json j = {{"added_tokens", added},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  StatusOr<model::Tokenizer> t = model::Tokenizer::parse(j.dump(), "tokenizer.json");
  DSA_CHECK(t.ok());
  return std::move(t).value();
}

int32_t largest_id(const testing::RunResult& r) {
  int32_t m = -1;
  for (const auto& out : r.outputs)
    for (int32_t id : out) m = std::max(m, id);
  return m;
}

TEST(PaddedVocabulary, PaddingIdsAreNeverEmittedAndSpeculationStaysLossless) {
  const auto prompts = testing::heldout_prompts({5, 17, 40});
  const std::vector<int32_t> max_new = {24, 24, 24};
  const model::Tokenizer small = byte_tokenizer();
  EngineOptions masked;
  masked.tokenizer = &small;

  auto plain_model = testing::tiny_model(0);
  const auto unmasked = testing::generate(*plain_model, prompts, max_new);
  // The test can fail: the unmasked model does emit ids the small tokenizer does not have.
  ASSERT_GE(largest_id(unmasked), 258);

  const auto greedy = testing::generate(*plain_model, prompts, max_new, {}, masked);
  EXPECT_LT(largest_id(greedy), 258);
  EXPECT_GE(largest_id(greedy), 0);

  auto spec_model = testing::tiny_model(3);
  const auto spec = testing::generate(*spec_model, prompts, max_new, {}, masked);
  EXPECT_EQ(spec.outputs, greedy.outputs) << "d = 3 under the mask differs from d = 0";

  SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.seed = 11;
  const auto s0 = testing::generate(*plain_model, prompts, max_new, sampled, masked);
  const auto s3 = testing::generate(*spec_model, prompts, max_new, sampled, masked);
  EXPECT_LT(largest_id(s0), 258);
  EXPECT_EQ(s3.outputs, s0.outputs) << "sampled d = 3 under the mask differs from d = 0";

  // The backend acceptance path (the op reads ids [0, 258) of rows 6144 wide) under the mask.
  EngineOptions on_backend = masked;
  on_backend.accept_on = AcceptOn::kBackend;
  EXPECT_EQ(testing::generate(*spec_model, prompts, max_new, {}, on_backend).outputs,
            greedy.outputs);
  EXPECT_EQ(testing::generate(*spec_model, prompts, max_new, sampled, on_backend).outputs,
            s0.outputs);
}

}  // namespace
}  // namespace dsa::engine
