#include "dsa/model/checkpoint.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "dsa/model/json_reader.h"

namespace dsa::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A shard must be a plain file name next to the index: no directories, no "..".
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

// The index's weight_map as (tensor -> shard file name), checked for shape only.
StatusOr<std::map<std::string, std::string>> read_weight_map(const fs::path& index) {
  const std::string where = index.string();
  std::ifstream in(index, std::ios::binary);
  if (!in) return not_found(where + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(where + ": not valid JSON");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return invalid_argument(where + ": must be an object with a \"weight_map\" object");
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, shard] : j["weight_map"].items()) {
    if (!shard.is_string() || !plain_file_name(shard.get<std::string>())) {
      return invalid_argument(
          fmt::format("{}: weight_map[{}] = {}: must be a file name next to "
                      "the index",
                      where, clip_for_message(name), json_for_message(shard)));
    }
    out.emplace(name, shard.get<std::string>());
  }
  if (out.empty()) return invalid_argument(where + ": weight_map is empty");
  return out;
}

}  // namespace

StatusOr<Checkpoint> Checkpoint::open(const fs::path& dir) {
  const fs::path index = dir / kSafetensorsIndexName;
  std::error_code ec;
  if (fs::exists(index, ec)) return open_index(index);
  return open_file(dir / kSafetensorsSingleName);
}

StatusOr<Checkpoint> Checkpoint::open_file(const fs::path& file) {
  DSA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(file));
  return of_file(std::move(f));
}

StatusOr<Checkpoint> Checkpoint::of_file(SafetensorsFile file) {
  Checkpoint c;
  c.root_ = file.path();
  DSA_RETURN_IF_ERROR(c.add_file(std::move(file)));
  return c;
}

Status Checkpoint::add_file(SafetensorsFile f) {
  const size_t i = files_.size();
  for (const std::string& name : f.names()) {
    auto [it, inserted] = where_.emplace(name, i);
    if (!inserted) {
      return invalid_argument(fmt::format("{}: tensor {} is also in {} (duplicate name)",
                                          f.path().string(), clip_for_message(name),
                                          files_[it->second].path().string()));
    }
  }
  files_.push_back(std::move(f));
  return ok_status();
}

StatusOr<Checkpoint> Checkpoint::open_index(const fs::path& index) {
  DSA_ASSIGN_OR_RETURN(auto weight_map, read_weight_map(index));
  // Shard -> the first tensor the index puts there (for the message when the shard is missing).
  std::map<std::string, std::string> shards;
  for (const auto& [name, shard] : weight_map) shards.emplace(shard, name);
  Checkpoint c;
  c.sharded_ = true;
  c.root_ = index;
  const fs::path dir = index.parent_path();
  for (const auto& [shard, first] : shards) {
    StatusOr<SafetensorsFile> f = SafetensorsFile::open(dir / shard);
    if (!f.ok()) {
      return Status(f.status().code(),
                    fmt::format("{} (shard named by {} for tensor {})", f.status().message(),
                                index.string(), clip_for_message(first)));
    }
    DSA_RETURN_IF_ERROR(c.add_file(std::move(*f)));
  }
  // The index and the shards agree exactly.
  for (const auto& [name, shard] : weight_map) {
    auto it = c.where_.find(name);
    const std::string expected = (dir / shard).string();
    if (it == c.where_.end()) {
      return not_found(fmt::format("{}: tensor {} not found (the index {} puts it there)", expected,
                                   clip_for_message(name), index.string()));
    }
    const std::string actual = c.files_[it->second].path().string();
    if (actual != expected) {
      return invalid_argument(fmt::format("{}: tensor {} is here, but the index {} puts it in {}",
                                          actual, clip_for_message(name), index.string(), shard));
    }
  }
  for (const auto& [name, i] : c.where_) {
    if (weight_map.count(name) == 0) {
      return invalid_argument(fmt::format("{}: tensor {} is not in the index {}",
                                          c.files_[i].path().string(), clip_for_message(name),
                                          index.string()));
    }
  }
  return c;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const SafetensorsFile& f : files_) n += f.data_bytes();
  return n;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

int64_t Checkpoint::file_index(std::string_view name) const {
  auto it = where_.find(name);
  return it == where_.end() ? -1 : int64_t(it->second);
}

std::string Checkpoint::path_of(std::string_view name) const {
  auto it = where_.find(name);
  return it == where_.end() ? root_.string() : files_[it->second].path().string();
}

StatusOr<TensorInfo> Checkpoint::get(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return not_found(root_.string() + ": tensor " + clip_for_message(name) + " not found");
  }
  return files_[it->second].get(name);
}

Status Checkpoint::check_intact(std::string_view name) const {
  auto it = where_.find(name);
  return it == where_.end() ? ok_status() : files_[it->second].check_intact(name);
}

Status Checkpoint::expect(std::string_view name, DType dtype, const Shape& shape) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return not_found(root_.string() + ": tensor " + clip_for_message(name) + " not found");
  }
  return files_[it->second].expect(name, dtype, shape);
}

uint64_t checkpoint_file_bytes(const fs::path& dir) {
  std::error_code ec;
  const fs::path index = dir / kSafetensorsIndexName;
  if (!fs::exists(index, ec)) {
    const uintmax_t n = fs::file_size(dir / kSafetensorsSingleName, ec);
    return ec ? 0 : uint64_t(n);
  }
  StatusOr<std::map<std::string, std::string>> wm = read_weight_map(index);
  if (!wm.ok()) return 0;
  std::set<std::string> shards;
  for (const auto& [name, shard] : *wm) shards.insert(shard);
  uint64_t total = 0;
  for (const std::string& s : shards) {
    const uintmax_t n = fs::file_size(dir / s, ec);
    if (!ec) total += uint64_t(n);
  }
  return total;
}

}  // namespace dsa::model
