#include "dsa/model/checkpoint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dsa/model/model_test_util.h"

namespace dsa::model {
namespace {

using testing::FakeTensor;
using testing::TempDir;
using testing::write_file;

void write_index(TempDir& dir, const nlohmann::json& weight_map) {
  nlohmann::json j = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_file(dir / "model.safetensors.index.json", j.dump());
}

// Two shards: a, b in the first; c in the second.
void write_two_shards(TempDir& dir) {
  write_file(dir / "s1.safetensors",
             testing::safetensors_bytes({{"a", "BF16", {4}, 2, 1}, {"b", "F32", {2}, 4, 2}}));
  write_file(dir / "s2.safetensors", testing::safetensors_bytes({{"c", "BF16", {3, 2}, 2, 3}}));
}

void expect_error(const StatusOr<Checkpoint>& c, const std::vector<std::string>& parts) {
  ASSERT_FALSE(c.ok());
  for (const std::string& p : parts) {
    EXPECT_NE(c.status().message().find(p), std::string::npos)
        << "missing '" << p << "' in: " << c.status().to_string();
  }
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  write_file(dir / "model.safetensors", testing::safetensors_bytes({{"a", "BF16", {4}, 2, 1}}));
  StatusOr<Checkpoint> c = Checkpoint::open(dir / "");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->sharded());
  EXPECT_EQ(c->num_files(), 1u);
  EXPECT_TRUE(c->contains("a"));
  EXPECT_EQ(c->total_bytes(), 8u);
}

TEST(Checkpoint, ShardedResolvesEveryTensorToItsShard) {
  TempDir dir;
  write_two_shards(dir);
  write_index(dir, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  StatusOr<Checkpoint> c = Checkpoint::open(dir / "");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->sharded());
  EXPECT_EQ(c->num_files(), 2u);
  EXPECT_EQ(c->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_NE(c->path_of("c").find("s2.safetensors"), std::string::npos);
  StatusOr<TensorInfo> t = c->get("c");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (Shape{3, 2}));
  EXPECT_EQ(static_cast<const char*>(t->data)[0], 3);
  EXPECT_TRUE(c->expect("b", DType::kF32, {2}).ok());
  Status s = c->expect("c", DType::kF32, {3, 2});
  EXPECT_NE(s.message().find("s2.safetensors"), std::string::npos) << s.to_string();
  EXPECT_EQ(c->total_bytes(), 8u + 8u + 12u);
  EXPECT_EQ(checkpoint_file_bytes(dir / ""),
            std::filesystem::file_size(dir / "s1.safetensors") +
                std::filesystem::file_size(dir / "s2.safetensors"));
}

TEST(Checkpoint, MissingShardNamesFileAndTensor) {
  TempDir dir;
  write_two_shards(dir);
  write_index(dir, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s3.safetensors"}});
  StatusOr<Checkpoint> c = Checkpoint::open(dir / "");
  expect_error(c, {"s3.safetensors", "cannot open", "tensor c"});
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

TEST(Checkpoint, TruncatedShard) {
  TempDir dir;
  write_two_shards(dir);
  std::string bytes = testing::safetensors_bytes({{"c", "BF16", {3, 2}, 2, 3}});
  write_file(dir / "s2.safetensors", bytes.substr(0, bytes.size() - 4));
  write_index(dir, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  expect_error(Checkpoint::open(dir / ""), {"s2.safetensors", "c"});
}

TEST(Checkpoint, TensorInIndexButNotInShard) {
  TempDir dir;
  write_two_shards(dir);
  write_index(dir, {{"a", "s1.safetensors"},
                    {"b", "s1.safetensors"},
                    {"c", "s2.safetensors"},
                    {"d", "s2.safetensors"}});
  expect_error(Checkpoint::open(dir / ""), {"s2.safetensors", "tensor d not found"});
}

TEST(Checkpoint, TensorInWrongShard) {
  TempDir dir;
  write_two_shards(dir);
  write_index(dir, {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}});
  expect_error(Checkpoint::open(dir / ""), {"s1.safetensors", "tensor b", "puts it in"});
}

TEST(Checkpoint, TensorInShardButNotInIndexIsRefused) {
  TempDir dir;
  write_two_shards(dir);
  write_index(dir, {{"a", "s1.safetensors"}, {"c", "s2.safetensors"}});
  expect_error(Checkpoint::open(dir / ""), {"s1.safetensors", "tensor b is not in the index"});
}

TEST(Checkpoint, DuplicateNameAcrossShards) {
  TempDir dir;
  write_two_shards(dir);
  write_file(dir / "s2.safetensors", testing::safetensors_bytes({{"a", "BF16", {4}, 2, 1}}));
  write_index(dir, {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  expect_error(Checkpoint::open(dir / ""), {"s2.safetensors", "tensor a", "duplicate"});
}

TEST(Checkpoint, BadIndexes) {
  TempDir dir;
  write_two_shards(dir);
  write_file(dir / "model.safetensors.index.json", "{not json");
  expect_error(Checkpoint::open(dir / ""), {"model.safetensors.index.json", "not valid JSON"});
  write_file(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error(Checkpoint::open(dir / ""), {"weight_map"});
  write_index(dir, {{"a", "../s1.safetensors"}});
  expect_error(Checkpoint::open(dir / ""), {"weight_map[a]", "file name"});
  write_index(dir, {{"a", 3}});
  expect_error(Checkpoint::open(dir / ""), {"weight_map[a]"});
  write_index(dir, nlohmann::json::object());
  expect_error(Checkpoint::open(dir / ""), {"weight_map is empty"});
}

}  // namespace
}  // namespace dsa::model
