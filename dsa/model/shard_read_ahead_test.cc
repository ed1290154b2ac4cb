// ShardReadAhead (issue 16): the shards the load reaches, and the next one, are read once each
// through pread (whole files: header included), in-memory images read nothing, a disabled
// read-ahead starts no thread, and read_at reads what the file holds.
#include "dsa/model/shard_read_ahead.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "dsa/model/model_test_util.h"

namespace dsa::model {
namespace {

using testing::TempDir;
using testing::write_file;

// Three shards of different sizes behind an index: t0 in s0, t1 in s1, t2 in s2.
Checkpoint three_shards(TempDir& dir, std::vector<uint64_t>& sizes) {
  nlohmann::json map;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "t" + std::to_string(i),
                      file = "s" + std::to_string(i) + ".safetensors";
    const std::string bytes =
        testing::safetensors_bytes({{name, "BF16", {int64_t(1000 * (i + 1))}, 2, char('a' + i)}});
    write_file(dir / file, bytes);
    sizes.push_back(bytes.size());
    map[name] = file;
  }
  write_file(dir / "model.safetensors.index.json",
             nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump());
  auto c = Checkpoint::open((dir / "x").parent_path());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return std::move(*c);
}

// Waits (up to 10 s) for the reader to reach `want` bytes; returns what it read.
uint64_t wait_for(const ShardReadAhead& r, uint64_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (r.bytes_read() < want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return r.bytes_read();
}

TEST(ShardReadAhead, ReadsTheTouchedShardAndTheNextOnce) {
  TempDir dir;
  std::vector<uint64_t> sizes;
  Checkpoint c = three_shards(dir, sizes);
  const int64_t i0 = c.file_index("t0"), i2 = c.file_index("t2");
  ShardReadAhead r(c, true);
  ASSERT_EQ(i0, 0);     // the checkpoint lists its files in order
  r.touch(size_t(i0));  // reads files 0 and 1
  const uint64_t want01 =
      std::filesystem::file_size(c.file(0).path()) + std::filesystem::file_size(c.file(1).path());
  EXPECT_EQ(wait_for(r, want01), want01);
  r.touch(0);
  r.touch(1);  // file 1 is read already; file 2 is queued by it
  const uint64_t all = want01 + std::filesystem::file_size(c.file(2).path());
  EXPECT_EQ(wait_for(r, all), all);
  r.touch(size_t(i2));  // the last file: nothing after it
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(r.bytes_read(), all);  // no file read twice
}

TEST(ShardReadAhead, DisabledReadsNothing) {
  TempDir dir;
  std::vector<uint64_t> sizes;
  Checkpoint c = three_shards(dir, sizes);
  ShardReadAhead r(c, false);
  r.touch(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(r.bytes_read(), 0u);
}

TEST(ShardReadAhead, ReadAtReadsTheFileAndNothingFromAnImage) {
  TempDir dir;
  std::vector<uint64_t> sizes;
  Checkpoint c = three_shards(dir, sizes);
  const SafetensorsFile& f = c.file(size_t(c.file_index("t1")));
  auto t = f.get("t1");
  ASSERT_TRUE(t.ok());
  const uint64_t size = std::filesystem::file_size(f.path());
  std::vector<unsigned char> whole(size + 10);
  EXPECT_EQ(f.read_at(0, whole.data(), whole.size()), int64_t(size));  // short at the end
  const auto data_at = size - t->nbytes;  // one tensor: the data section ends the file
  EXPECT_EQ(std::memcmp(whole.data() + data_at, t->data, t->nbytes), 0);
  EXPECT_EQ(f.read_at(size, whole.data(), 10), 0);

  auto image = SafetensorsFile::from_image(
      "image", size, [&](unsigned char* p) { std::memcpy(p, whole.data(), size); });
  ASSERT_TRUE(image.ok()) << image.status().to_string();
  EXPECT_EQ(image->read_at(0, whole.data(), 10), 0);
}

}  // namespace
}  // namespace dsa::model
