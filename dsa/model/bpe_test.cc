// Bpe's heap-ordered merging against the rule it implements, written out the slow way: merge the
// adjacent pair whose merge comes first in the list, leftmost among equals, until none is left.
#include "dsa/model/bpe.h"

#include <gtest/gtest.h>

#include <map>

#include "dsa/model/byte_level.h"
#include "dsa/testing/random.h"
#include "dsa/testing/watchdog.h"

namespace dsa::model {
namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;

// Vocab of the 256 byte-level characters (id = byte) and each merge result after them.
std::unordered_map<std::string, int32_t> vocab_for(const Merges& merges) {
  std::unordered_map<std::string, int32_t> v;
  for (int b = 0; b < 256; ++b) v[std::string(byte_level_char(static_cast<uint8_t>(b)))] = b;
  for (const auto& [l, r] : merges) v.try_emplace(l + r, static_cast<int32_t>(v.size()));
  return v;
}

// The rule on strings; quadratic, which is fine for short words.
std::vector<int32_t> reference_encode(const std::string& word, const Merges& merges,
                                      const std::unordered_map<std::string, int32_t>& vocab) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t i = 0; i < merges.size(); ++i) rank.try_emplace(merges[i], i);
  std::vector<std::string> symbols;
  for (char c : word) symbols.emplace_back(byte_level_char(static_cast<uint8_t>(c)));
  for (;;) {
    size_t best = symbols.size(), best_rank = SIZE_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = rank.find({symbols[i], symbols[i + 1]});
      if (it != rank.end() && it->second < best_rank) best = i, best_rank = it->second;
    }
    if (best == symbols.size()) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<ptrdiff_t>(best) + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& s : symbols) ids.push_back(vocab.at(s));
  return ids;
}

TEST(Bpe, HeapOrderEqualsTheRescanRule) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  for (int set = 0; set < 30; ++set) {
    // Random merges over a 3-letter alphabet, duplicates included (the first rank counts).
    std::vector<std::string> tokens = {"a", "b", "c"};
    Merges merges;
    const int n = static_cast<int>(rng.randint(1, 40));
    for (int i = 0; i < n; ++i) {
      const std::string& l = tokens[rng.randint(0, tokens.size() - 1)];
      const std::string& r = tokens[rng.randint(0, tokens.size() - 1)];
      merges.emplace_back(l, r);
      tokens.push_back(l + r);
    }
    const auto vocab = vocab_for(merges);
    StatusOr<Bpe> bpe = Bpe::create(vocab, merges, false, "tokenizer.json");
    ASSERT_TRUE(bpe.ok()) << bpe.status().to_string();
    for (int w = 0; w < 200; ++w) {
      std::string word(static_cast<size_t>(rng.randint(0, 40)), 'a');
      for (char& ch : word) ch = static_cast<char>('a' + rng.randint(0, 2));
      std::vector<int32_t> got;
      bpe->encode_word(word, &got);
      ASSERT_EQ(got, reference_encode(word, merges, vocab)) << "word " << word << ", set " << set;
    }
  }
}

// A megabyte with no split point is one word: quadratic merging would take ~10^12 steps.
TEST(Bpe, LongWordEncodesQuickly) {
  const Merges merges = {{"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}};
  const auto vocab = vocab_for(merges);
  StatusOr<Bpe> bpe = Bpe::create(vocab, merges, false, "tokenizer.json");
  ASSERT_TRUE(bpe.ok());
  dsa::testing::within_seconds(10, [&] {
    std::vector<int32_t> ids;
    bpe->encode_word(std::string((1 << 20) + 3, 'a'), &ids);
    ASSERT_EQ(ids.size(), (1u << 17) + 2);  // 2^17 eights, then "aa" and "a"
    EXPECT_EQ(ids.front(), vocab.at("aaaaaaaa"));
    EXPECT_EQ(ids[1 << 17], vocab.at("aa"));
    EXPECT_EQ(ids.back(), vocab.at("a"));
  });
}

TEST(Bpe, RejectsIdsBeyondTheVocabularyCap) {
  auto vocab = vocab_for({});
  vocab["big"] = 1 << 20;
  StatusOr<Bpe> bpe = Bpe::create(vocab, {}, false, "tokenizer.json");
  ASSERT_FALSE(bpe.ok());
  EXPECT_EQ(bpe.status().message(),
            "tokenizer.json: model.vocab[\"big\"] = 1048576: must be in [0, 1048576)");
}

}  // namespace
}  // namespace dsa::model
