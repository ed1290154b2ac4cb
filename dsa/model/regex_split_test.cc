#include "dsa/model/regex_split.h"

#include <gtest/gtest.h>

namespace dsa::model {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view pattern, std::string_view text, bool literal = false) {
  StatusOr<Regex> re = Regex::compile(pattern, literal);
  DSA_CHECK(re.ok());
  std::vector<std::string_view> views;
  re->split_isolated(text, &views);
  Pieces out(views.begin(), views.end());
  std::string joined;
  for (const std::string& p : out) joined += p;
  EXPECT_EQ(joined, text) << "pieces must concatenate back to the input";
  return out;
}

Pieces gpt2(std::string_view text) { return split(kGpt2SplitPattern, text); }

// Expected pieces are those of the GPT-2 pattern under Python's `regex` module (as tiktoken and
// HF use it), worked by hand.
TEST(Gpt2Split, WordsKeepTheirLeadingSpace) {
  EXPECT_EQ(gpt2("Hello world"), (Pieces{"Hello", " world"}));
}

TEST(Gpt2Split, Contractions) {
  EXPECT_EQ(gpt2("I'm sure we'll, don't"),
            (Pieces{"I", "'m", " sure", " we", "'ll", ",", " don", "'t"}));
}

TEST(Gpt2Split, NumbersSplitFromLettersAndPunctuation) {
  EXPECT_EQ(gpt2("abc123 4567"), (Pieces{"abc", "123", " 4567"}));
  EXPECT_EQ(gpt2("3.14"), (Pieces{"3", ".", "14"}));
}

TEST(Gpt2Split, PunctuationRuns) {
  EXPECT_EQ(gpt2("hi!! ok?!"), (Pieces{"hi", "!!", " ok", "?!"}));
}

// \s+(?!\S) leaves the last space of a run to the following word.
TEST(Gpt2Split, RunsOfSpaces) {
  EXPECT_EQ(gpt2("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(gpt2("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(gpt2("  lead"), (Pieces{" ", " lead"}));
}

TEST(Gpt2Split, Newlines) {
  EXPECT_EQ(gpt2("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(gpt2("end\n\n"), (Pieces{"end", "\n\n"}));
}

TEST(Gpt2Split, NonAsciiLettersAreLetters) {
  EXPECT_EQ(gpt2("café naïve"), (Pieces{"café", " naïve"}));
  EXPECT_EQ(gpt2("日本語 テキスト"), (Pieces{"日本語", " テキスト"}));
  EXPECT_EQ(gpt2("Ωmega٣"), (Pieces{"Ωmega", "٣"}));  // U+0663 is \p{N}
}

TEST(Gpt2Split, EmptyInputGivesNoPieces) { EXPECT_EQ(gpt2(""), Pieces{}); }

// Invalid UTF-8 cannot be matched; it survives as a gap piece of its own.
TEST(Gpt2Split, InvalidUtf8BytesSurviveAsGaps) {
  EXPECT_EQ(gpt2("ab\xff\xfe"
                 "cd"),
            (Pieces{"ab", "\xff\xfe", "cd"}));
  EXPECT_EQ(gpt2("\xc3"), (Pieces{"\xc3"}));  // truncated two-byte sequence
}

TEST(RegexSplit, DigitGroupsOfThree) {
  EXPECT_EQ(split(R"(\p{N}{1,3})", "x1234567"), (Pieces{"x", "123", "456", "7"}));
}

TEST(RegexSplit, LiteralPattern) {
  EXPECT_EQ(split("a.b", "xa.bya.b", true), (Pieces{"x", "a.b", "y", "a.b"}));
  EXPECT_EQ(split("a.b", "axb", true), (Pieces{"axb"}));  // '.' is not a wildcard
}

TEST(RegexSplit, EmptyMatchesYieldNoPieces) {
  EXPECT_EQ(split("x*", "abxxc"), (Pieces{"ab", "xx", "c"}));
  EXPECT_EQ(split("x*", "é\xff"), (Pieces{"é\xff"}));
}

TEST(RegexSplit, BadPatternIsRejected) {
  StatusOr<Regex> re = Regex::compile("(ab");
  ASSERT_FALSE(re.ok());
  EXPECT_EQ(re.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(re.status().message().rfind("regex \"(ab\" does not compile at offset 3: ", 0), 0u)
      << re.status().message();
}

}  // namespace
}  // namespace dsa::model
