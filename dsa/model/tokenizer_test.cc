#include "dsa/model/tokenizer.h"

#include <gtest/gtest.h>

#include "dsa/model/byte_level.h"
#include "dsa/model/model_test_util.h"
#include "dsa/testing/random.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::write_file;
using Ids = std::vector<int32_t>;

// Vocab: byte b -> id b (printable ASCII bytes spell themselves, so 'h' = 104), then the merges.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}};
constexpr int32_t kHe = 256, kLl = 257, kHell = 258, kHello = 259, kSpaceW = 260, kOr = 261;

json byte_vocab() {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[std::string(byte_level_char(static_cast<uint8_t>(b)))] = b;
  return v;
}

json merge_strings(const std::vector<std::pair<std::string, std::string>>& merges) {
  json m = json::array();
  for (const auto& [a, b] : merges) m.push_back(a + " " + b);
  return m;
}

json byte_level_pre(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

// DeepSeek-V3's pre-tokenizer: digit groups, CJK runs, its word regex, then ByteLevel.
json deepseek_pre() {
  auto split = [](std::string re) {
    return json{{"type", "Split"},
                {"pattern", {{"Regex", re}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  };
  return {{"type", "Sequence"},
          {"pretokenizers",
           {split(R"(\p{N}{1,3})"), split("[一-龥\u3040-ゟ゠-ヿ]+"),
            split(R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?)"
                  R"([\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
            byte_level_pre(false)}}};
}

json added(int32_t id, std::string content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// A tokenizer.json as HF writes it.
json tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges = kMerges,
                    json pre = byte_level_pre(true)) {
  json vocab = byte_vocab();
  for (size_t i = 0; i < merges.size(); ++i) {
    vocab[merges[i].first + merges[i].second] = 256 + static_cast<int>(i);
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {added(300, "<｜begin▁of▁sentence｜>", true), added(301, "<｜end▁of▁sentence｜>", true),
            added(302, "<think>", false), added(303, "<think></think>", false)}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merge_strings(merges)}}}};
}

Tokenizer make(const json& j) {
  StatusOr<Tokenizer> t = Tokenizer::parse(j.dump(), "tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  DSA_CHECK(t.ok());
  return std::move(t).value();
}

std::string decode(const Tokenizer& t, const Ids& ids) {
  StatusOr<std::string> s = t.decode(ids);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : "";
}

TEST(Tokenizer, LoadsFromFile) {
  TempDir dir;
  auto path = write_file(dir / "tokenizer.json", tokenizer_json().dump());
  StatusOr<Tokenizer> t = Tokenizer::load(path);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->vocab_size(), 304);  // 262 BPE tokens + added ids up to 303
  EXPECT_EQ(t->encode("hello"), Ids{kHello});
}

// Hand-computed: "hello" merges he, ll, hell, hello; " world" is Ġ w o r l d -> Ġw (rank 4) then
// or (rank 5), leaving l and d as bytes.
TEST(Tokenizer, HandComputedMerges) {
  Tokenizer t = make(tokenizer_json());
  EXPECT_EQ(t.encode("hello world"), (Ids{kHello, kSpaceW, kOr, 'l', 'd'}));
  EXPECT_EQ(t.encode("hell"), Ids{kHell});
  EXPECT_EQ(t.encode("helo"), (Ids{kHe, 'l', 'o'}));
  EXPECT_EQ(t.encode("yell"), (Ids{'y', 'e', kLl}));
  EXPECT_EQ(t.encode("hellohello"), (Ids{kHello, kHello}));
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(decode(t, {kHello, kSpaceW, kOr, 'l', 'd'}), "hello world");
}

// The pair with the lowest rank merges first, whatever its position.
TEST(Tokenizer, LowestRankMergesFirst) {
  Tokenizer ab_first = make(tokenizer_json({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(ab_first.encode("abc"), (Ids{256, 'c'}));  // ab, c
  Tokenizer bc_first = make(tokenizer_json({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(bc_first.encode("abc"), (Ids{'a', 256}));  // a, bc
  // Equal ranks: leftmost first.
  Tokenizer aa = make(tokenizer_json({{"a", "a"}}));
  EXPECT_EQ(aa.encode("aaa"), (Ids{256, 'a'}));
  EXPECT_EQ(aa.encode("aaaa"), (Ids{256, 256}));
}

TEST(Tokenizer, MergesAsPairs) {
  json j = tokenizer_json();
  json pairs = json::array();
  for (const auto& [a, b] : kMerges) pairs.push_back({a, b});
  j["model"]["merges"] = pairs;
  Tokenizer t = make(j);
  EXPECT_EQ(t.encode("hello world"), (Ids{kHello, kSpaceW, kOr, 'l', 'd'}));
}

TEST(Tokenizer, IgnoreMergesTakesWholeWords) {
  json j = tokenizer_json({{"a", "b"}, {"b", "c"}, {"a", "bc"}});  // "abc" = 258
  EXPECT_EQ(make(j).encode("abc"), (Ids{256, 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(make(j).encode("abc"), Ids{258});
}

// Added tokens are cut out before pre-tokenization, longest first.
TEST(Tokenizer, AddedTokensMatchVerbatim) {
  Tokenizer t = make(tokenizer_json());
  EXPECT_EQ(t.bos_id(), 300);
  EXPECT_EQ(t.eos_id(), 301);
  EXPECT_EQ(t.encode("x<think>hello<｜end▁of▁sentence｜>"), (Ids{'x', 302, kHello, 301}));
  EXPECT_EQ(t.encode("<think></think>hello"), (Ids{303, kHello}));
  EXPECT_EQ(t.encode("<think><think>"), (Ids{302, 302}));
  EXPECT_EQ(t.encode("<thin"), (Ids{'<', 't', 'h', 'i', 'n'}));  // a prefix is plain text
  EXPECT_EQ(t.encode("hello", /*add_bos=*/true), (Ids{300, kHello}));
  EXPECT_EQ(decode(t, {300, 'x', 302, 301}),
            "<｜begin▁of▁sentence｜>x<think><｜end▁of▁sentence｜>");
  StatusOr<std::string> skipped = t.decode(Ids{300, 'x', 302, 301}, /*skip_special_tokens=*/true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "x<think>");  // <think> is not special
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(302));
  EXPECT_FALSE(t.is_special(kHello));
}

TEST(Tokenizer, TokenLookups) {
  Tokenizer t = make(tokenizer_json());
  EXPECT_EQ(t.token_to_id("Ġw"), kSpaceW);
  EXPECT_EQ(t.token_to_id("<think>"), 302);
  EXPECT_EQ(t.token_to_id("Ġ"), 32);
  EXPECT_EQ(t.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(t.id_to_token(kHello), "hello");
  EXPECT_EQ(t.id_to_token(301), "<｜end▁of▁sentence｜>");
  EXPECT_EQ(t.id_to_token(262), std::nullopt);  // unassigned id between vocab and added tokens
  EXPECT_EQ(t.id_to_token(-1), std::nullopt);
  EXPECT_EQ(t.id_to_token(304), std::nullopt);
}

TEST(Tokenizer, SpecialIdsFromConfig) {
  Tokenizer t = make(tokenizer_json());
  ASSERT_TRUE(t.set_special_ids(kHe, kLl).ok());
  EXPECT_EQ(t.bos_id(), kHe);
  EXPECT_EQ(t.eos_id(), kLl);
  Status s = t.set_special_ids(0, 262);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "eos id 262: not a token id (vocab size 304)");
  EXPECT_EQ(t.eos_id(), kLl);  // unchanged on error
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  Tokenizer t = make(tokenizer_json());
  for (int32_t bad : {-1, 262, 304, 1 << 30}) {
    StatusOr<std::string> s = t.decode(Ids{kHello, bad});
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.status().message(),
              "ids[1] = " + std::to_string(bad) + ": not a token id (vocab size 304)");
  }
}

// HF's ByteLevel decoder emits a token holding non-alphabet characters as its own UTF-8.
TEST(Tokenizer, DecodeNonByteLevelTokenAsUtf8) {
  json j = tokenizer_json();
  j["model"]["vocab"]["日本"] = 270;
  Tokenizer t = make(j);
  EXPECT_EQ(decode(t, {'a', 270}), "a日本");
}

TEST(Tokenizer, DeepSeekSequencePreTokenizer) {
  Tokenizer t = make(tokenizer_json(kMerges, deepseek_pre()));
  std::vector<std::string_view> pieces = t.pre_tokenize("Hello, 世界! 12345 it's\n\n  x");
  // Checked against Python's `regex` module applying the three splits in turn.
  EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
            (std::vector<std::string>{"Hello", ",", " ", "世界", "!", " ", "123", "45", " it", "'s",
                                      "\n\n", " ", " x"}));
  EXPECT_EQ(t.encode("hello world"), (Ids{kHello, kSpaceW, kOr, 'l', 'd'}));
}

std::string random_bytes(dsa::testing::Rng& rng, size_t max_len) {
  std::string s(static_cast<size_t>(rng.randint(0, static_cast<int64_t>(max_len))), '\0');
  for (char& c : s) c = static_cast<char>(rng.randint(0, 255));
  return s;
}

std::string random_utf8(dsa::testing::Rng& rng, size_t max_chars) {
  static const std::vector<std::string> kPieces = {
      "a",    "Z",     " ",      "  ",      "\n",
      "\t",   "7",     "42",     "'s",      "é",
      "ß",    "Ω",     "日本",   "テ",      "한",
      "😀",    "٣",     "!",      "?!",      "-",
      "\r\n", "hello", " world", "<think>", "<｜end▁of▁sentence｜>"};
  std::string s;
  const int64_t n = rng.randint(0, static_cast<int64_t>(max_chars));
  for (int64_t i = 0; i < n; ++i) s += kPieces[rng.randint(0, kPieces.size() - 1)];
  return s;
}

void expect_round_trips(const Tokenizer& t, const std::string& s) {
  Ids ids = t.encode(s);
  StatusOr<std::string> back = t.decode(ids);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(*back, s) << "size " << s.size();
}

// Byte-level BPE covers every byte: arbitrary bytes (mostly invalid UTF-8) survive exactly.
TEST(Tokenizer, RoundTripsRandomBytes) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  Tokenizer gpt2 = make(tokenizer_json());
  Tokenizer deepseek = make(tokenizer_json(kMerges, deepseek_pre()));
  for (int i = 0; i < 500; ++i) {
    const std::string s = random_bytes(rng, 64);
    expect_round_trips(gpt2, s);
    expect_round_trips(deepseek, s);
  }
  std::string all(256, '\0');
  for (int b = 0; b < 256; ++b) all[b] = static_cast<char>(b);
  expect_round_trips(gpt2, all);
  expect_round_trips(deepseek, all);
}

TEST(Tokenizer, RoundTripsRandomUtf8) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  Tokenizer gpt2 = make(tokenizer_json());
  Tokenizer deepseek = make(tokenizer_json(kMerges, deepseek_pre()));
  for (int i = 0; i < 500; ++i) {
    const std::string s = random_utf8(rng, 24);
    expect_round_trips(gpt2, s);
    expect_round_trips(deepseek, s);
  }
}

// ---- Rejections: each names the file and the problem. ----

void expect_rejected(const json& j, StatusCode code, const std::string& message) {
  StatusOr<Tokenizer> t = Tokenizer::parse(j.dump(), "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), code);
  EXPECT_EQ(t.status().message(), "tokenizer.json: " + message);
}

TEST(TokenizerRejects, FileThatIsNotJson) {
  TempDir dir;
  auto path = write_file(dir / "tokenizer.json", "{\"model\": {\"vocab\": }");
  StatusOr<Tokenizer> t = Tokenizer::load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = t.status().message();
  EXPECT_EQ(m.rfind(path.string() + ": not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("line 1, column 21"), std::string::npos) << m;
}

TEST(TokenizerRejects, MissingFile) {
  TempDir dir;
  StatusOr<Tokenizer> t = Tokenizer::load(dir / "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

TEST(TokenizerRejects, MissingModel) {
  json j = tokenizer_json();
  j.erase("model");
  expect_rejected(j, StatusCode::kInvalidArgument, "model: missing");
}

TEST(TokenizerRejects, MissingVocab) {
  json j = tokenizer_json();
  j["model"].erase("vocab");
  expect_rejected(j, StatusCode::kInvalidArgument, "model.vocab: missing");
}

TEST(TokenizerRejects, MissingMerges) {
  json j = tokenizer_json();
  j["model"].erase("merges");
  expect_rejected(j, StatusCode::kInvalidArgument, "model.merges: missing");
}

TEST(TokenizerRejects, MergeOfUnknownToken) {
  json j = tokenizer_json();
  j["model"]["merges"].push_back("he zz");
  expect_rejected(j, StatusCode::kInvalidArgument,
                  "model.merges[6] = \"he zz\": \"zz\" is not in the vocab");
}

TEST(TokenizerRejects, MergeWhoseResultIsNotInVocab) {
  json j = tokenizer_json();
  j["model"]["merges"].push_back("x y");
  expect_rejected(j, StatusCode::kInvalidArgument,
                  "model.merges[6] = \"x y\": the merged token \"xy\" is not in the vocab");
}

TEST(TokenizerRejects, MalformedMergeString) {
  json j = tokenizer_json();
  j["model"]["merges"].push_back("abc");
  expect_rejected(j, StatusCode::kInvalidArgument,
                  "model.merges[6] = \"abc\": must be \"left right\" with exactly one space");
}

TEST(TokenizerRejects, VocabWithoutEveryByte) {
  json j = tokenizer_json();
  j["model"]["vocab"].erase("Ā");  // byte 0
  expect_rejected(j, StatusCode::kInvalidArgument,
                  "model.vocab lacks the byte-level token \"Ā\" for byte 0, so not every input "
                  "could be encoded");
}

TEST(TokenizerRejects, DuplicateVocabId) {
  json j = tokenizer_json();
  j["model"]["vocab"]["zz"] = 5;
  expect_rejected(j, StatusCode::kInvalidArgument,
                  "model.vocab: id 5 is given to both \"ą\" and \"zz\"");
}

TEST(TokenizerRejects, UnsupportedModelType) {
  json j = tokenizer_json();
  j["model"]["type"] = "WordPiece";
  expect_rejected(j, StatusCode::kUnimplemented,
                  "model.type = \"WordPiece\": unsupported; only \"BPE\"");
}

TEST(TokenizerRejects, UnsupportedPreTokenizer) {
  json j = tokenizer_json(kMerges, {{"type", "Whitespace"}});
  expect_rejected(j, StatusCode::kUnimplemented,
                  "pre_tokenizer.type = \"Whitespace\": unsupported; ByteLevel or Sequence");
}

TEST(TokenizerRejects, UnsupportedSplitBehavior) {
  json pre = deepseek_pre();
  pre["pretokenizers"][1]["behavior"] = "Removed";
  expect_rejected(tokenizer_json(kMerges, pre), StatusCode::kUnimplemented,
                  "pre_tokenizer.pretokenizers[1].behavior = \"Removed\": unsupported; only "
                  "\"Isolated\"");
}

TEST(TokenizerRejects, SequenceWithoutFinalByteLevel) {
  json pre = deepseek_pre();
  pre["pretokenizers"].erase(3);
  expect_rejected(tokenizer_json(kMerges, pre), StatusCode::kUnimplemented,
                  "pre_tokenizer.pretokenizers[2].type = \"Split\": the sequence must end with "
                  "ByteLevel");
}

TEST(TokenizerRejects, SplitRegexThatDoesNotCompile) {
  json pre = deepseek_pre();
  pre["pretokenizers"][0]["pattern"]["Regex"] = "(";
  StatusOr<Tokenizer> t = Tokenizer::parse(tokenizer_json(kMerges, pre).dump(), "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message().rfind("tokenizer.json: pre_tokenizer.pretokenizers[0]: regex "
                                       "\"(\" does not compile at offset 1: ",
                                       0),
            0u)
      << t.status().message();
}

TEST(TokenizerRejects, PrefixSpace) {
  json pre = byte_level_pre(true);
  pre["add_prefix_space"] = true;
  expect_rejected(tokenizer_json(kMerges, pre), StatusCode::kUnimplemented,
                  "pre_tokenizer.add_prefix_space = true: unsupported");
}

TEST(TokenizerRejects, Normalizer) {
  json j = tokenizer_json();
  j["normalizer"] = {{"type", "NFC"}};
  expect_rejected(j, StatusCode::kUnimplemented,
                  "normalizer = {\"type\":\"NFC\"}: unsupported; only null is implemented");
}

TEST(TokenizerRejects, DecoderOtherThanByteLevel) {
  json j = tokenizer_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_rejected(j, StatusCode::kUnimplemented,
                  "decoder.type = \"WordPiece\": unsupported; ByteLevel");
}

TEST(TokenizerRejects, ByteFallback) {
  json j = tokenizer_json();
  j["model"]["byte_fallback"] = true;
  expect_rejected(j, StatusCode::kUnimplemented, "model.byte_fallback = true: unsupported");
}

TEST(TokenizerRejects, AddedTokenThatClashesWithVocab) {
  json j = tokenizer_json();
  j["added_tokens"].push_back(added(kHe, "<x>", true));
  expect_rejected(j, StatusCode::kInvalidArgument,
                  "added_tokens[4].id = 256: already the vocab's id of \"he\"");
}

TEST(TokenizerRejects, AddedTokenWithLstrip) {
  json j = tokenizer_json();
  json a = added(310, "<mask>", true);
  a["lstrip"] = true;
  j["added_tokens"].push_back(a);
  expect_rejected(j, StatusCode::kUnimplemented, "added_tokens[4].lstrip = true: unsupported");
}

}  // namespace
}  // namespace dsa::model
