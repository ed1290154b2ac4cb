// parse_json and read_text_file: the shared edge of every JSON loader, where a file that is not
// JSON, not a regular file or not a sane size becomes one Status instead of an exception, a
// blocked read or a recursion that overflows the stack.
#include "dsa/model/json_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "dsa/model/model_limits.h"
#include "dsa/model/model_test_util.h"
#include "dsa/testing/watchdog.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::write_file;

std::string parse_error(std::string_view text) {
  StatusOr<json> j = parse_json(text, "config.json");
  EXPECT_FALSE(j.ok()) << text;
  if (j.ok()) return "";
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  return j.status().message();
}

// nlohmann throws out_of_range, not parse_error, for a number beyond double: both are caught.
TEST(ParseJson, NumberOverflowIsAStatus) {
  const std::string m = parse_error("{\n  \"rope_theta\": 1e400\n}");
  EXPECT_EQ(m.rfind("config.json: not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("number overflow parsing '1e400'"), std::string::npos) << m;
  EXPECT_NE(parse_error("[-1e999]").find("number overflow"), std::string::npos);
}

// Python's json.dump writes NaN and Infinity, which JSON does not have: the message points at
// the key as well as at the column.
TEST(ParseJson, NanLiteralNamesTheKey) {
  for (const char* literal : {"NaN", "Infinity", "-Infinity"}) {
    const std::string m =
        parse_error(std::string("{\"vocab_size\": 6144,\n \"rms_norm_eps\": ") + literal + "}");
    EXPECT_NE(m.find("line 2"), std::string::npos) << m;
    EXPECT_NE(m.find("(near key \"rms_norm_eps\")"), std::string::npos) << m;
  }
}

TEST(ParseJson, DuplicateKeyIsRejectedAtAnyDepth) {
  EXPECT_EQ(parse_error("{\"vocab_size\": 1, \"vocab_size\": 2}"),
            "config.json: key \"vocab_size\" appears twice in one object");
  EXPECT_EQ(parse_error("{\"a\": {\"b\": 1, \"c\": {}, \"b\": 2}}"),
            "config.json: key \"b\" appears twice in one object");
  // The same key in sibling objects is fine.
  EXPECT_TRUE(parse_json("[{\"a\": 1}, {\"a\": 2}, {\"b\": {\"a\": 3}}]", "x").ok());
  EXPECT_TRUE(parse_json("{\"a\": {\"a\": {\"a\": 1}}}", "x").ok());
}

// The parser is iterative, but printing or comparing a deep value recurses; nesting is capped.
TEST(ParseJson, DeepNestingIsRejectedWithoutRecursion) {
  const std::string ok_depth = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(parse_json(ok_depth, "x").ok());
  const std::string one_more = "[" + ok_depth + "]";
  EXPECT_EQ(parse_error(one_more), "config.json: nesting deeper than 64 levels");
  dsa::testing::within_seconds(10, [] {
    const size_t n = 2'000'000;
    EXPECT_EQ(parse_error(std::string(n, '[') + std::string(n, ']')),
              "config.json: nesting deeper than 64 levels");
    EXPECT_EQ(parse_error("{\"a\":" + std::string(n, '[')),
              "config.json: nesting deeper than 64 levels (near key \"a\")");
  });
}

TEST(ParseJson, LongTokensAreClippedInMessages) {
  const std::string m = parse_error("{\"k\": \"" + std::string(1 << 20, 'x'));  // unterminated
  EXPECT_LT(m.size(), 1000u) << m.substr(0, 2000);
}

TEST(JsonForMessage, ClipsAndReplacesInvalidUtf8) {
  EXPECT_EQ(json_for_message(json(std::string("a\xff"))), "\"a\xEF\xBF\xBD\"");
  const std::string long_value = json_for_message(json(std::string(10000, 'v')));
  EXPECT_EQ(long_value.size(), kMessageChars + 3);
}

TEST(ReadTextFile, RefusesWhatIsNotARegularFile) {
  TempDir dir;
  StatusOr<std::string> d = read_text_file((dir / "").string(), 1 << 20);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos);
  // A FIFO with no writer: opening it for reading would block forever without O_NONBLOCK.
  const std::string fifo = (dir / "config.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  dsa::testing::within_seconds(5, [&] {
    StatusOr<std::string> f = read_text_file(fifo, 1 << 20);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().message(), fifo + ": not a regular file (a directory, FIFO or device)");
  });
  StatusOr<std::string> dev = read_text_file("/dev/zero", 1 << 20);  // endless
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("not a regular file"), std::string::npos);
}

TEST(ReadTextFile, RefusesFilesOverTheLimitBeforeReading) {
  TempDir dir;
  auto path = write_file(dir / "tokenizer.json", "{}");
  std::filesystem::resize_file(path, int64_t{1} << 34);  // 16 GiB, sparse: nothing is written
  StatusOr<std::string> t = read_text_file(path.string(), kMaxTokenizerFileBytes);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), path.string() +
                                      ": 17179869184 bytes, more than the 268435456 a file of this "
                                      "kind may have");
  std::filesystem::resize_file(path, 5);
  StatusOr<std::string> small = read_text_file(path.string(), 5);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small, std::string("{}\0\0\0", 5));
}

}  // namespace
}  // namespace dsa::model
