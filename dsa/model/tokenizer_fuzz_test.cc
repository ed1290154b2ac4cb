// tokenizer.json fuzz: seeded byte damage and truncations of the shipped tokenizer, structured
// mutations of each field it reads, and sizes meant to stall a loader (a million added tokens, a
// catastrophic split regex, a megabyte word). Every load returns quickly without throwing; a
// tokenizer that loads still encodes and decodes, and is either accepted by the config check or
// refused with a Status.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "dsa/model/fuzz_test_util.h"
#include "dsa/model/model_config.h"
#include "dsa/model/tokenizer.h"
#include "dsa/model/tokenizer_check.h"
#include "dsa/testing/watchdog.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::load_quickly;

const std::string& shipped_text() {
  static const std::string text =
      testing::read_bytes(testing::repo_path("models/tiny-dsa/tokenizer.json"));
  return text;
}

const ModelConfig& shipped_config() {
  static const ModelConfig c = [] {
    StatusOr<ModelConfig> c = load_model_config(testing::repo_path("models/tiny-dsa/config.json"));
    DSA_CHECK(c.ok());
    return std::move(c).value();
  }();
  return c;
}

// A tokenizer that loaded must still work: encode never fails, decode of its own ids gives the
// text back, and the config check answers with a Status.
void exercise(const Tokenizer& t, const std::string& what) {
  const std::string sample = "And the king said unto him, \xff\xfe 12345 <｜end▁of▁sentence｜>\n";
  const std::vector<int32_t> ids = t.encode(sample);
  StatusOr<std::string> back = t.decode(ids);
  ASSERT_TRUE(back.ok()) << what << ": " << back.status().to_string();
  EXPECT_EQ(*back, sample) << what;
  Status s = check_tokenizer_matches(t, shipped_config());
  if (!s.ok()) EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
}

// Parses `text`; a refusal must name the file, a success must work.
void load_and_check(const std::string& text, const std::string& what) {
  std::optional<Tokenizer> loaded;
  Status s = load_quickly(what, [&]() -> Status {
    StatusOr<Tokenizer> t = Tokenizer::parse(text, "tokenizer.json");
    if (t.ok()) loaded.emplace(std::move(t).value());
    return t.status();
  });
  if (loaded) {
    exercise(*loaded, what);
    return;
  }
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnimplemented)
      << what << ": " << s.to_string();
  EXPECT_EQ(s.message().rfind("tokenizer.json", 0), 0u) << what << ": " << s.message();
}

TEST(TokenizerFuzz, ShippedTokenizerLoadsAndMatches) {
  StatusOr<Tokenizer> t = Tokenizer::parse(shipped_text(), "tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  exercise(*t, "shipped");
  EXPECT_TRUE(check_tokenizer_matches(*t, shipped_config()).ok());
}

// Seeded byte damage (DSA_TEST_SEED replays it). Each parse of the 400 KB file takes ~20 ms.
TEST(TokenizerFuzz, RandomByteDamage) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  dsa::testing::within_seconds(60, [&] {
    for (int i = 0; i < 150; ++i) {
      std::string what;
      const std::string damaged = testing::mutate_bytes(shipped_text(), rng, 0, &what);
      load_and_check(damaged, what);
    }
  });
}

// The structure a byte flip rarely reaches: each field the loader reads, given the wrong type,
// a wrong value, or removed.
TEST(TokenizerFuzz, StructuredMutations) {
  const json base = json::parse(shipped_text());
  const std::vector<json> values = {nullptr, true,          -1,         0,
                                    1 << 20, (1 << 20) - 1, 2147483648, 1e300,
                                    "text",  json::array(), {{"a", 1}}};
  const std::vector<json::json_pointer> fields = {
      json::json_pointer("/model"),
      json::json_pointer("/model/type"),
      json::json_pointer("/model/vocab"),
      json::json_pointer("/model/vocab/Ġt"),
      json::json_pointer("/model/vocab/a"),
      json::json_pointer("/model/merges"),
      json::json_pointer("/model/merges/0"),
      json::json_pointer("/model/merges/0/1"),
      json::json_pointer("/model/dropout"),
      json::json_pointer("/model/byte_fallback"),
      json::json_pointer("/model/ignore_merges"),
      json::json_pointer("/model/continuing_subword_prefix"),
      json::json_pointer("/model/end_of_word_suffix"),
      json::json_pointer("/pre_tokenizer"),
      json::json_pointer("/pre_tokenizer/type"),
      json::json_pointer("/pre_tokenizer/add_prefix_space"),
      json::json_pointer("/pre_tokenizer/use_regex"),
      json::json_pointer("/decoder"),
      json::json_pointer("/decoder/type"),
      json::json_pointer("/normalizer"),
      json::json_pointer("/added_tokens"),
      json::json_pointer("/added_tokens/0"),
      json::json_pointer("/added_tokens/0/id"),
      json::json_pointer("/added_tokens/0/content"),
      json::json_pointer("/added_tokens/0/special"),
      json::json_pointer("/added_tokens/1/lstrip"),
      json::json_pointer("/added_tokens/1/single_word"),
  };
  dsa::testing::within_seconds(120, [&] {
    for (const json::json_pointer& field : fields) {
      json removed = base;
      json& parent = removed[field.parent_pointer()];
      if (parent.is_array()) {
        parent.erase(std::stoul(field.back()));
      } else {
        parent.erase(field.back());
      }
      load_and_check(removed.dump(), "delete " + field.to_string());
      for (const json& v : values) {
        json j = base;
        j[field] = v;
        load_and_check(j.dump(), field.to_string() + " = " + v.dump());
      }
    }
  });
}

// A split step set to each regex: empty, one that matches nothing, catastrophic backtracking
// (PCRE2's match limit ends it), and one that does not compile.
TEST(TokenizerFuzz, SplitPatterns) {
  json base = json::parse(shipped_text());
  const std::string kLong = std::string(4000, 'a') + "!";
  for (const std::string re : {"", "(?!)", "(a+)+$", "(a|aa)+b", "((((", "\\p{Unknown}"}) {
    json j = base;
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    const std::string what = "split regex " + re;
    StatusOr<Tokenizer> t = Tokenizer::parse(j.dump(), "tokenizer.json");
    if (!t.ok()) {
      EXPECT_EQ(t.status().message().rfind("tokenizer.json: pre_tokenizer.pretokenizers[0]: ", 0),
                0u)
          << what << ": " << t.status().message();
      continue;
    }
    dsa::testing::within_seconds(20, [&] {
      exercise(*t, what);
      StatusOr<std::string> back = t->decode(t->encode(kLong));
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(*back, kLong) << what;
    });
  }
}

TEST(TokenizerFuzz, TooManyPreTokenizerSteps) {
  json j = json::parse(shipped_text());
  json steps = json::array();
  for (int i = 0; i < 65; ++i) {
    steps.push_back({{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}});
  }
  steps.push_back({{"type", "ByteLevel"}, {"use_regex", false}});
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  StatusOr<Tokenizer> t = Tokenizer::parse(j.dump(), "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("must be an array of 1 to 64 steps"), std::string::npos)
      << t.status().message();
}

// Duplicate checks that scanned every earlier added token were quadratic: 2*10^5 tokens took
// minutes. Hashed, the whole load takes about a second.
TEST(TokenizerFuzz, ManyAddedTokens) {
  json j = json::parse(shipped_text());
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    j["added_tokens"].push_back({{"id", 6144 + i}, {"content", "<x" + std::to_string(i) + ">"}});
  }
  const std::string text = j.dump();
  dsa::testing::within_seconds(30, [&] {
    StatusOr<Tokenizer> t = Tokenizer::parse(text, "tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->vocab_size(), 6144 + n);
    EXPECT_EQ(
        t->encode("a<x7>b<x199999>"),
        (std::vector<int32_t>{*t->token_to_id("a"), 6151, *t->token_to_id("b"), 6144 + n - 1}));
    Status s = check_tokenizer_matches(*t, shipped_config());
    EXPECT_EQ(s.message(),
              "tokenizer.json has 206144 token ids (1 + its largest id), config.json vocab_size "
              "= 6144: encode could give ids [6144, 206144) past the embedding's rows");
  });
  // The same content twice is refused, naming both.
  j["added_tokens"].push_back({{"id", 6144 + n}, {"content", "<x5>"}});
  StatusOr<Tokenizer> dup = Tokenizer::parse(j.dump(), "tokenizer.json");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(),
            "tokenizer.json: added_tokens[200002].content = \"<x5>\": "
            "duplicates added token id 6149");
}

// The GPT-2 pre-tokenizer keeps a run of letters whole; encode must stay near-linear in it.
TEST(TokenizerFuzz, MegabyteWord) {
  StatusOr<Tokenizer> t = Tokenizer::parse(shipped_text(), "tokenizer.json");
  ASSERT_TRUE(t.ok());
  std::string word;
  for (int i = 0; i < (1 << 20); ++i) word += static_cast<char>('a' + (i * 7 + i / 13) % 26);
  dsa::testing::within_seconds(20, [&] {
    const std::vector<int32_t> ids = t->encode(word);
    StatusOr<std::string> back = t->decode(ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, word);
  });
}

}  // namespace
}  // namespace dsa::model
