// Incremental detokenization: UTF-8 split across tokens is held back, invalid bytes become U+FFFD
// by maximal subparts (as Python's errors="replace"), and pushing token by token gives the same
// text as decoding the whole sequence at once.
#include "dsa/model/text_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsa::model {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(SanitizeUtf8, ValidTextIsUnchanged) {
  const std::string s = "plain, na\xC3\xAFve \xE2\x98\x83 \xF0\x9F\x98\x80";
  EXPECT_EQ(sanitize_utf8(s), s);
  EXPECT_EQ(sanitize_utf8(""), "");
}

TEST(SanitizeUtf8, InvalidBytesBecomeOneReplacementPerMaximalSubpart) {
  EXPECT_EQ(sanitize_utf8("a\xFF"
                          "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kFffd + kFffd);  // overlong lead, stray continuation
  EXPECT_EQ(sanitize_utf8("\xE0\xA0"
                          "A"),
            kFffd + "A");                                           // valid prefix cut by 'A'
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // a surrogate: no prefix
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(sanitize_utf8("x\xF0\x9F\x98"), "x" + kFffd);  // truncated at the end
}

Tokenizer tiny_tokenizer() {
  auto t = Tokenizer::load(std::string(DSA_SOURCE_DIR) + "/models/tiny-dsa/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(*t);
}

TEST(TextStream, TokenByTokenEqualsWholeDecode) {
  const Tokenizer tok = tiny_tokenizer();
  const std::string text =
      "And the king said: na\xC3\xAFve \xE2\x98\x83 \xF0\x9F\x98\x80 caf\xC3\xA9!";
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_GT(ids.size(), 10u);
  TextStream stream(&tok);
  for (int32_t id : ids) {
    ASSERT_TRUE(stream.push(std::span<const int32_t>(&id, 1)).ok());
    // What is out is always a prefix of the full text, and valid UTF-8.
    EXPECT_EQ(text.compare(0, stream.text().size(), stream.text()), 0);
    EXPECT_EQ(sanitize_utf8(stream.text()), stream.text());
  }
  stream.finish();
  EXPECT_EQ(stream.text(), text);
}

// Byte tokens that split a character, or an invalid sequence, across pushes: the incomplete tail
// is held back (nothing of it is out), and the result equals sanitising the whole byte string.
TEST(TextStream, SequencesSplitAcrossTokensAreHeldBackThenResolved) {
  const Tokenizer tok = tiny_tokenizer();
  const std::vector<std::string> cases = {
      "a\xE2\x98\x83"
      "b",                         // U+2603 split over three tokens
      "\xE0\x80z",                 // E0 then a continuation outside its range: two replacements
      "\xF0\x9F\xF0\x9F\x98\x80",  // a cut 4-byte lead, then a whole emoji
      "\xC3",                      // a lone lead byte at the end: one replacement at finish
  };
  for (const std::string& bytes : cases) {
    TextStream stream(&tok);
    size_t held_at_some_point = 0;
    for (char c : bytes) {
      const std::vector<int32_t> ids = tok.encode(std::string_view(&c, 1));
      ASSERT_TRUE(stream.push(ids).ok());
      EXPECT_EQ(sanitize_utf8(stream.text()), stream.text());
      const size_t lead = static_cast<unsigned char>(c) >= 0xC0 ? 1 : 0;
      held_at_some_point += lead && stream.text().find(kFffd) == std::string::npos ? 1 : 0;
    }
    EXPECT_GT(held_at_some_point, 0u) << "a lead byte was not held back";
    stream.finish();
    EXPECT_EQ(stream.text(), sanitize_utf8(bytes));
  }
  TextStream snowman(&tok);
  for (char c : std::string("\xE2\x98")) {
    ASSERT_TRUE(snowman.push(tok.encode(std::string_view(&c, 1))).ok());
  }
  EXPECT_EQ(snowman.text(), "");  // two of three bytes: nothing out yet
  const char last = '\x83';
  ASSERT_TRUE(snowman.push(tok.encode(std::string_view(&last, 1))).ok());
  EXPECT_EQ(snowman.text(), "\xE2\x98\x83");
}

TEST(TextStream, InvalidIdsAndTruncation) {
  const Tokenizer tok = tiny_tokenizer();
  TextStream stream(&tok);
  const int32_t bad = tok.vocab_size() + 5;
  EXPECT_EQ(stream.push(std::span<const int32_t>(&bad, 1)).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> ids = tok.encode("hello world");
  ASSERT_TRUE(stream.push(ids).ok());
  stream.truncate(5);
  EXPECT_EQ(stream.text(), "hello");
  TextStream none;
  EXPECT_FALSE(none.push(ids).ok());
}

}  // namespace
}  // namespace dsa::model
