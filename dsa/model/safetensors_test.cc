#include "dsa/model/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>

#include "dsa/model/model_test_util.h"
#include "dsa/testing/watchdog.h"

namespace dsa::model {
namespace {

using testing::FakeTensor;
using testing::safetensors_bytes;
using testing::safetensors_raw;
using testing::TempDir;
using testing::u64_le;
using testing::write_file;

std::vector<FakeTensor> three_tensors() {
  return {{"w", "BF16", {2, 3}, 2, 0x11},
          {"bias", "F32", {4}, 4, 0x22},
          {"w8", "F8_E4M3", {5}, 1, 0x33}};
}

// Opens `bytes` written to a temp file and expects kInvalidArgument with `message` after
// "<path>: ".
void expect_rejected(const std::string& bytes, const std::string& message) {
  TempDir dir;
  auto path = write_file(dir / "model.safetensors", bytes);
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message(), path.string() + ": " + message);
}

TEST(Safetensors, OpensWellFormedFile) {
  TempDir dir;
  auto path =
      write_file(dir / "m.safetensors", safetensors_bytes(three_tensors(), {{"format", "pt"}}));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->names(), (std::vector<std::string>{"bias", "w", "w8"}));
  EXPECT_EQ(f->size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  StatusOr<TensorInfo> w = f->get("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dtype, DType::kBF16);
  EXPECT_EQ(w->shape, (Shape{2, 3}));
  EXPECT_EQ(w->nbytes, 12u);
  StatusOr<TensorInfo> b = f->get("bias");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype, DType::kF32);
  EXPECT_EQ(b->nbytes, 16u);
  // Packed back to back: bias follows w's 12 bytes; each tensor holds only its own fill byte.
  EXPECT_EQ(static_cast<const char*>(b->data) - static_cast<const char*>(w->data), 12);
  for (size_t i = 0; i < w->nbytes; ++i) EXPECT_EQ(static_cast<const char*>(w->data)[i], 0x11);
  for (size_t i = 0; i < b->nbytes; ++i) EXPECT_EQ(static_cast<const char*>(b->data)[i], 0x22);
  StatusOr<TensorInfo> w8 = f->get("w8");
  ASSERT_TRUE(w8.ok());
  EXPECT_EQ(w8->dtype, DType::kE4M3);
  EXPECT_EQ(static_cast<const unsigned char*>(w8->data)[4], 0x33);
  EXPECT_TRUE(f->expect("w", DType::kBF16, {2, 3}).ok());
}

TEST(Safetensors, EmptyFileAndZeroSizedTensorsAreValid) {
  TempDir dir;
  StatusOr<SafetensorsFile> none =
      SafetensorsFile::open(write_file(dir / "a", "\x02" + std::string(7, '\0') + "{}"));
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(none->size(), 0u);
  // Zero-sized tensors take no bytes and so overlap nothing, even at the same offset.
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(write_file(
      dir / "b",
      safetensors_bytes({{"e0", "BF16", {0, 4}}, {"e1", "F32", {3, 0}, 4}, {"x", "U8", {1}, 1}})));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  StatusOr<TensorInfo> e = f->get("e0");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->nbytes, 0u);
  EXPECT_EQ(e->shape, (Shape{0, 4}));
}

TEST(Safetensors, MoveKeepsTheMapping) {
  TempDir dir;
  auto path = write_file(dir / "m.safetensors", safetensors_bytes(three_tensors()));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  SafetensorsFile moved = std::move(f).value();
  SafetensorsFile again = std::move(moved);
  StatusOr<TensorInfo> w = again.get("w8");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(static_cast<const unsigned char*>(w->data)[0], 0x33);
  EXPECT_EQ(moved.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST(Safetensors, MissingFileIsNotFound) {
  TempDir dir;
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(dir / "none.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("none.safetensors: cannot open"), std::string::npos);
}

TEST(Safetensors, MissingTensorNamesTensorAndFile) {
  TempDir dir;
  auto path = write_file(dir / "m.safetensors", safetensors_bytes(three_tensors()));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  StatusOr<TensorInfo> t = f->get("lm_head.weight");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.status().message(), path.string() + ": tensor lm_head.weight not found");
  Status s = f->expect("lm_head.weight", DType::kBF16, {1});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), path.string() + ": tensor lm_head.weight not found");
}

TEST(Safetensors, MisShapedTensorSaysExpectedAndGot) {
  TempDir dir;
  auto path = write_file(dir / "m.safetensors", safetensors_bytes(three_tensors()));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  Status s = f->expect("w", DType::kBF16, {3, 2});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path.string() + ": w: expected bf16 [3, 2], got bf16 [2, 3]");
  s = f->expect("bias", DType::kBF16, {4});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path.string() + ": bias: expected bf16 [4], got f32 [4]");
}

TEST(Safetensors, RejectsUnsupportedDtype) {
  expect_rejected(safetensors_bytes({{"half", "F16", {4}, 2}}),
                  "half: dtype F16 is not supported (F32, BF16, F8_E4M3, I32, U8)");
}

TEST(Safetensors, RejectsFileShorterThanLengthField) {
  expect_rejected(std::string("\x05\x00\x00", 3), "3 bytes, shorter than the 8-byte header length");
}

TEST(Safetensors, RejectsHeaderLengthBeyondFile) {
  expect_rejected(u64_le(1000) + "{}",
                  "header length 1000 exceeds the file (10 bytes) or the limit of 100000000 "
                  "bytes");
}

TEST(Safetensors, RejectsHeaderLengthAboveLimit) {
  expect_rejected(u64_le(uint64_t{1} << 40) + "{}",
                  "header length 1099511627776 exceeds the file (10 bytes) or the limit of "
                  "100000000 bytes");
}

TEST(Safetensors, RejectsDataShorterThanOffsets) {
  std::string bytes = safetensors_bytes(three_tensors());
  bytes.resize(bytes.size() - 2);  // truncated inside the last tensor (w8 at [28, 33))
  expect_rejected(bytes, "w8: data_offsets [28,33] must satisfy begin <= end <= data size 31");
}

TEST(Safetensors, RejectsOverlappingOffsets) {
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_rejected(safetensors_raw(header, std::string(12, '\0')),
                  "b: data_offsets [4, ...] overlap a [0, 8)");
}

// The tensors must tile the data exactly (as the reference implementation requires): a gap or
// a tail means the offsets or the header length are off.
TEST(Safetensors, RejectsGapBetweenTensors) {
  std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                       R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
  expect_rejected(
      safetensors_raw(header, std::string(6, '\0')),
      "data bytes [2, 4), before b, belong to no tensor (one missing from the header?)");
}

TEST(Safetensors, RejectsDataBeyondTheLastTensor) {
  std::string bytes = safetensors_bytes(three_tensors());
  bytes += "zz";
  expect_rejected(bytes,
                  "the tensors end at data byte 33, but the data section has 35 bytes (is the "
                  "header length right?)");
}

// The writer pads the header with spaces, so a length one short still parses: every tensor
// would be read a byte early, which only the tiling check catches.
TEST(Safetensors, RejectsHeaderLengthOneShort) {
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})" + std::string(3, ' ');
  std::string bytes = safetensors_raw(header, "xy");
  bytes[0] = static_cast<char>(header.size() - 1);
  expect_rejected(bytes,
                  "the tensors end at data byte 2, but the data section has 3 bytes (is the "
                  "header length right?)");
}

TEST(Safetensors, RejectsEndBeforeBegin) {
  std::string header = R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})";
  expect_rejected(safetensors_raw(header, std::string(12, '\0')),
                  "a: data_offsets [8,4] must satisfy begin <= end <= data size 12");
}

TEST(Safetensors, RejectsSizeThatIsNotNumelTimesDtypeSize) {
  std::string header = R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}})";
  expect_rejected(safetensors_raw(header, std::string(12, '\0')),
                  "a: data_offsets [0,10] span 10 bytes, but BF16 [2, 3] needs 12");
}

TEST(Safetensors, RejectsHeaderThatIsNotJson) {
  TempDir dir;
  auto path = write_file(dir / "m.safetensors", safetensors_raw("{\"a\": [1, 2", ""));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = f.status().message();
  EXPECT_EQ(m.rfind(path.string() + ": header: not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("line 1, column 12"), std::string::npos) << m;
}

TEST(Safetensors, RejectsHeaderThatIsNotAnObject) {
  expect_rejected(safetensors_raw("[]", ""), "header must be a JSON object");
}

TEST(Safetensors, RejectsDuplicateTensorName) {
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_rejected(safetensors_raw(header, "xy"), "header: key \"a\" appears twice in one object");
}

TEST(Safetensors, RejectsNegativeShape) {
  std::string header = R"({"a":{"dtype":"U8","shape":[-1,2],"data_offsets":[0,2]}})";
  expect_rejected(safetensors_raw(header, "xy"), "a: shape [-1,2] must hold integers >= 0");
}

TEST(Safetensors, RejectsShapeOverflow) {
  std::string header =
      R"({"a":{"dtype":"U8","shape":[4611686018427387904,8],"data_offsets":[0,2]}})";
  expect_rejected(safetensors_raw(header, "xy"), "a: shape [4611686018427387904,8] overflows");
}

// An empty tensor needs no bytes, but its other dims are still multiplied by whoever reads them.
TEST(Safetensors, RejectsOverflowingShapeOfAnEmptyTensor) {
  std::string header =
      R"({"a":{"dtype":"U8","shape":[0,4611686018427387904,8],"data_offsets":[0,0]}})";
  expect_rejected(safetensors_raw(header, ""), "a: shape [0,4611686018427387904,8] overflows");
}

TEST(Safetensors, RejectsRankAboveEight) {
  std::string header = R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})";
  expect_rejected(safetensors_raw(header, "x"),
                  "a: shape [1,1,1,1,1,1,1,1,1] has 9 dimensions, more than 8");
}

TEST(Safetensors, RejectsNumberOverflowInHeader) {
  TempDir dir;
  std::string header = R"({"a":{"dtype":"U8","shape":[1e400],"data_offsets":[0,1]}})";
  auto path = write_file(dir / "m.safetensors", safetensors_raw(header, "x"));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("number overflow parsing '1e400'"), std::string::npos)
      << f.status().message();
}

// Names come from the file: a megabyte name is clipped in messages, not copied whole.
TEST(Safetensors, LongNamesAreClippedInMessages) {
  const std::string name(1 << 20, 'n');
  std::string header = "{\"" + name + R"(":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})";
  TempDir dir;
  auto path = write_file(dir / "m.safetensors", safetensors_raw(header, "xy"));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_LT(f.status().message().size(), 400u);
  EXPECT_NE(f.status().message().find("(1048576 bytes): dtype F16 is not supported"),
            std::string::npos);
}

TEST(Safetensors, RejectsDirectoryAndFifo) {
  TempDir dir;
  StatusOr<SafetensorsFile> d = SafetensorsFile::open(dir / "");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  const std::string fifo = (dir / "model.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  dsa::testing::within_seconds(5, [&] {
    StatusOr<SafetensorsFile> f = SafetensorsFile::open(fifo);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().message(), fifo + ": not a regular file (a directory, FIFO or device)");
  });
}

TEST(Safetensors, RejectsEntryWithoutOffsets) {
  std::string header = R"({"a":{"dtype":"U8","shape":[2]}})";
  expect_rejected(safetensors_raw(header, "xy"),
                  "a: {\"dtype\":\"U8\",\"shape\":[2]}: must be {dtype, shape, data_offsets}");
}

TEST(Safetensors, RejectsMalformedOffsets) {
  std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0]}})";
  expect_rejected(safetensors_raw(header, "xy"),
                  "a: data_offsets [0] must be [begin, end] with integers >= 0");
}

TEST(Safetensors, RejectsNonStringMetadata) {
  expect_rejected(safetensors_raw(R"({"__metadata__":{"format":1}})", ""),
                  "__metadata__.format must be a string");
}

}  // namespace
}  // namespace dsa::model
