// Safetensors header fuzz on the shipped checkpoint's real header: seeded byte damage, random
// truncations of the file, and structured lies about each entry (dtype, shape, offsets, the
// length prefix). Files keep the real data size as a sparse tail, so each case costs a 17 KB
// write. Opening never throws, hangs or reads out of bounds (every tensor of a file that opens
// is touched at both ends); a lie is refused by open() or by check_model_tensors with a Status
// naming the file and the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "dsa/model/fuzz_test_util.h"
#include "dsa/model/model_tensors.h"
#include "dsa/model/model_test_util.h"
#include "dsa/testing/watchdog.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::load_quickly;

struct Shipped {
  std::string prefix;  // u64 length + header JSON
  json header;
  uint64_t data_size = 0;
  ModelConfig config;
};

const Shipped& shipped() {
  static const Shipped s = [] {
    Shipped s;
    const std::string path = testing::repo_path("models/tiny-dsa/model.safetensors");
    const std::string head = testing::read_bytes(path, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(head[i]);
    s.prefix = testing::read_bytes(path, 8 + n);
    s.header = json::parse(s.prefix.substr(8));
    s.data_size = std::filesystem::file_size(path) - 8 - n;
    StatusOr<ModelConfig> c = load_model_config(testing::repo_path("models/tiny-dsa/config.json"));
    DSA_CHECK(c.ok());
    s.config = std::move(c).value();
    return s;
  }();
  return s;
}

// Writes `prefix` then `tail` bytes of zeros (sparse: nothing is written for them).
std::filesystem::path write_sparse(const testing::TempDir& dir, const std::string& prefix,
                                   uint64_t tail) {
  auto path = testing::write_file(dir / "model.safetensors", prefix);
  std::filesystem::resize_file(path, prefix.size() + tail);
  return path;
}

// Opens `path` and checks it against the tiny config; returns the first refusal (OK if none).
// A file that opens has every tensor read at its first and last byte, which would fault if
// validation let an offset past the mapping.
Status open_and_check(const std::filesystem::path& path, const std::string& what) {
  return load_quickly(what, [&]() -> Status {
    StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
    if (!f.ok()) return f.status();
    unsigned sum = 0;
    for (const std::string& name : f->names()) {
      StatusOr<TensorInfo> t = f->get(name);
      if (!t.ok()) return t.status();
      const auto* bytes = static_cast<const volatile unsigned char*>(t->data);
      if (t->nbytes > 0) sum += bytes[0] + bytes[t->nbytes - 1];
    }
    EXPECT_EQ(sum, 0u);  // the sparse tail reads as zeros
    DSA_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::open_file(path));
    return check_model_tensors(c, shipped().config);
  });
}

void expect_refused(const Status& s, const std::filesystem::path& path, const std::string& names,
                    const std::string& what) {
  ASSERT_FALSE(s.ok()) << what << ": accepted";
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound)
      << what << ": " << s.to_string();
  EXPECT_EQ(s.message().rfind(path.string() + ": ", 0), 0u) << what << ": " << s.message();
  EXPECT_NE(s.message().find(names), std::string::npos) << what << ": " << s.message();
}

std::string with_length(const std::string& header) {
  return testing::u64_le(header.size()) + header;
}

TEST(SafetensorsFuzz, ShippedHeaderMatchesTheConfig) {
  testing::TempDir dir;
  auto path = write_sparse(dir, shipped().prefix, shipped().data_size);
  Status s = open_and_check(path, "shipped");
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(SafetensorsFuzz, RandomHeaderDamage) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  testing::TempDir dir;
  dsa::testing::within_seconds(60, [&] {
    for (int i = 0; i < 400; ++i) {
      std::string what;
      // Damage anywhere in the length prefix or the header; the data keeps its size.
      const std::string damaged = testing::mutate_bytes(shipped().prefix, rng, 0, &what);
      auto path = write_sparse(dir, damaged, shipped().data_size);
      Status s = open_and_check(path, what);
      if (!s.ok()) {
        EXPECT_EQ(s.message().rfind(path.string() + ": ", 0), 0u) << what << ": " << s.message();
      }
    }
  });
}

TEST(SafetensorsFuzz, RandomTruncation) {
  dsa::testing::Rng rng(dsa::testing::test_seed());
  testing::TempDir dir;
  const uint64_t total = shipped().prefix.size() + shipped().data_size;
  dsa::testing::within_seconds(60, [&] {
    for (int i = 0; i < 100; ++i) {
      const uint64_t keep = static_cast<uint64_t>(rng.randint(0, static_cast<int64_t>(total) - 1));
      const std::string what = "truncated to " + std::to_string(keep) + " bytes";
      auto path = testing::write_file(
          dir / "model.safetensors", shipped().prefix.substr(0, std::min<uint64_t>(keep, 1 << 20)));
      std::filesystem::resize_file(path, keep);
      Status s = open_and_check(path, what);
      expect_refused(s, path, "", what);
    }
  });
}

TEST(SafetensorsFuzz, LyingEntries) {
  const json& base = shipped().header;
  std::vector<std::string> names;
  for (const auto& [name, entry] : base.items()) {
    if (name != "__metadata__") names.push_back(name);
  }
  // A spread of tensors: vectors and matrices, first and last in the data.
  std::vector<std::string> sample;
  for (size_t i = 0; i < names.size(); i += 17) sample.push_back(names[i]);
  sample.push_back(names.back());

  const uint64_t data = shipped().data_size;
  const std::vector<std::pair<std::string, std::function<void(json&)>>> lies = {
      {"dtype F16", [](json& e) { e["dtype"] = "F16"; }},
      {"dtype F64", [](json& e) { e["dtype"] = "F64"; }},
      {"dtype 5", [](json& e) { e["dtype"] = 5; }},
      {"dtype lower case", [](json& e) { e["dtype"] = "bf16"; }},
      {"dtype U8", [](json& e) { e["dtype"] = "U8"; }},
      {"shape 2^62 x 4",
       [](json& e) {
         e["shape"] = {int64_t{1} << 62, 4};
       }},
      {"shape 0 x 2^63",
       [](json& e) {
         e["shape"] = {0, uint64_t{1} << 63};
       }},
      {"shape -1", [](json& e) { e["shape"] = {-1}; }},
      {"shape 1.5", [](json& e) { e["shape"] = {1.5}; }},
      {"shape string", [](json& e) { e["shape"] = "x"; }},
      {"shape scalar", [](json& e) { e["shape"] = json::array(); }},
      {"shape rank 9", [](json& e) { e["shape"] = json(std::vector<int>(9, 1)); }},
      {"shape transposed",
       [](json& e) {
         if (e["shape"].size() == 2) std::swap(e["shape"][0], e["shape"][1]);
         e["shape"].push_back(1);
       }},
      {"offsets 2^64",
       [](json& e) {
         e["data_offsets"] = {0, 1e19};
       }},
      {"offsets reversed",
       [](json& e) {
         e["data_offsets"] = {e["data_offsets"][1], e["data_offsets"][0]};
       }},
      {"offsets negative", [](json& e) { e["data_offsets"][0] = -4; }},
      {"offsets past data", [data](json& e) { e["data_offsets"][1] = data + 1; }},
      {"offsets three", [](json& e) { e["data_offsets"].push_back(0); }},
      {"offsets shifted",
       [](json& e) {
         e["data_offsets"][0] = e["data_offsets"][0].get<uint64_t>() + 2;
         e["data_offsets"][1] = e["data_offsets"][1].get<uint64_t>() + 2;
       }},
      {"offsets of the first tensor",
       [](json& e) {
         e["data_offsets"] = {0, 16};
       }},
      {"entry null", [](json& e) { e = nullptr; }},
      {"entry without dtype", [](json& e) { e.erase("dtype"); }},
      {"entry with a duplicate key", [](json& e) { e["dtype"] = "@dup@"; }},
  };
  testing::TempDir dir;
  dsa::testing::within_seconds(60, [&] {
    for (const std::string& name : sample) {
      for (const auto& [lie, apply] : lies) {
        json h = base;
        apply(h[name]);
        std::string text = h.dump();
        // A key given twice cannot be made through json; spliced into the text instead.
        const size_t dup = text.find("\"@dup@\"");
        if (dup != std::string::npos) text.replace(dup, 7, "\"BF16\",\"dtype\":\"F32\"");
        const std::string what = name + ": " + lie;
        auto path = write_sparse(dir, with_length(text), data);
        // Which tensor a refusal names depends on the lie (an overlap names both).
        Status s = open_and_check(path, what);
        if (lie == "offsets of the first tensor" &&
            s.message().find("overlap") != std::string::npos) {
          expect_refused(s, path, "overlap", what);
        } else if (lie == "entry with a duplicate key") {
          expect_refused(s, path, "key \"dtype\" appears twice", what);
        } else {
          expect_refused(s, path, name, what);
        }
      }
    }
  });
}

TEST(SafetensorsFuzz, MissingRenamedAndExtraTensors) {
  const json& base = shipped().header;
  testing::TempDir dir;
  const std::string name = "model.layers.2.self_attn.indexer.k_norm.bias";
  ASSERT_TRUE(base.contains(name));
  // An entry dropped from the header leaves its bytes to no tensor.
  json dropped = base;
  dropped.erase(name);
  auto path = write_sparse(dir, with_length(dropped.dump()), shipped().data_size);
  expect_refused(open_and_check(path, "dropped"), path, "belong to no tensor", "dropped");

  // A consistent file without the last tensor in the data is refused by the inventory.
  std::string last;
  uint64_t last_begin = 0;
  for (const auto& [n, e] : base.items()) {
    if (n != "__metadata__" && e["data_offsets"][0].get<uint64_t>() >= last_begin) {
      last = n;
      last_begin = e["data_offsets"][0].get<uint64_t>();
    }
  }
  json missing = base;
  missing.erase(last);
  path = write_sparse(dir, with_length(missing.dump()), last_begin);
  expect_refused(open_and_check(path, "missing"), path, "tensor " + last + " not found", "missing");

  json renamed = base;
  renamed[name + "x"] = renamed[name];
  renamed.erase(name);
  path = write_sparse(dir, with_length(renamed.dump()), shipped().data_size);
  expect_refused(open_and_check(path, "renamed"), path, name, "renamed");

  json extra = base;
  extra["model.layers.5.input_layernorm.weight"] = {
      {"dtype", "BF16"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
  path = write_sparse(dir, with_length(extra.dump()), shipped().data_size);
  expect_refused(open_and_check(path, "extra"), path,
                 "model.layers.5.input_layernorm.weight: unexpected tensor", "extra");

  json meta = base;
  meta["__metadata__"] = {{"format", 1}};
  path = write_sparse(dir, with_length(meta.dump()), shipped().data_size);
  expect_refused(open_and_check(path, "metadata"), path, "__metadata__.format", "metadata");
}

TEST(SafetensorsFuzz, LyingLengthPrefix) {
  const std::string header = shipped().prefix.substr(8);
  testing::TempDir dir;
  for (uint64_t n :
       {uint64_t{0}, uint64_t{1}, uint64_t{header.size() - 1}, uint64_t{header.size() + 1},
        uint64_t{1} << 31, uint64_t{1} << 63, ~uint64_t{0}}) {
    const std::string what = "length prefix " + std::to_string(n);
    auto path = write_sparse(dir, testing::u64_le(n) + header, shipped().data_size);
    expect_refused(open_and_check(path, what), path, "", what);
  }
}

}  // namespace
}  // namespace dsa::model
