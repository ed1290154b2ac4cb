// Checkpoint: the tensors of a model directory, held in one `model.safetensors` or, as the real
// DeepSeek-V3.2 / GLM-5 checkpoints ship, in shards named by `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {"tensor": "model-00001-of-000163.safetensors", ...}}).
//
// Each shard is opened once and memory-mapped read-only (SafetensorsFile: the same code path as a
// single file, no host copy); every tensor is resolved through the index to its shard. The index
// and the shards must agree exactly: a shard the index names that is missing, a truncated shard
// (its header promises more bytes than the file has), a tensor the index puts in a shard that does
// not hold it, a tensor a shard holds that the index does not list (refused, not warned: it would
// otherwise be silently ignored), and a name held by two shards are each a Status naming the file
// and the tensor. Dtypes, shapes and FP8 scales are checked against the config by
// check_model_tensors (model_tensors.h), which reads through this class.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/model/safetensors.h"

namespace dsa::model {

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr std::string_view kSafetensorsSingleName = "model.safetensors";

// Where a load stands: shards whose tensors have all been read, tensors read, and their bytes.
// Reported as each shard is finished, and at least every kLoadProgressBytes within a shard (a
// single 40 GB model.safetensors still moves the bar).
struct LoadProgress {
  size_t shards_done = 0, shards_total = 0;
  size_t tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;
  double seconds = 0;  // since the first tensor was read
};
inline constexpr uint64_t kLoadProgressBytes = 1ull << 30;
using LoadProgressFn = std::function<void(const LoadProgress&)>;

class Checkpoint {
 public:
  // `dir`/model.safetensors.index.json when it exists (sharded), else `dir`/model.safetensors.
  static StatusOr<Checkpoint> open(const std::filesystem::path& dir);
  // One safetensors file (tests, tools).
  static StatusOr<Checkpoint> open_file(const std::filesystem::path& file);
  // One file already opened (an in-memory image: model/random_weights.h).
  static StatusOr<Checkpoint> of_file(SafetensorsFile file);
  // No files and no tensors (model_weight_layout reads nothing).
  static Checkpoint empty() { return Checkpoint(); }
  // The index and its shards (the shards live next to the index).
  static StatusOr<Checkpoint> open_index(const std::filesystem::path& index);

  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;

  bool sharded() const { return sharded_; }
  size_t num_files() const { return files_.size(); }
  const SafetensorsFile& file(size_t i) const { return files_[i]; }
  // Bytes of the data sections of all files.
  uint64_t total_bytes() const;

  // Tensor names in sorted order.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const { return where_.count(name) != 0; }
  // Index into file() of the file holding `name`; -1 when absent.
  int64_t file_index(std::string_view name) const;
  // The path of the file holding `name` (the index or the single file when absent): for messages.
  std::string path_of(std::string_view name) const;
  // kNotFound "<file>: tensor <name> not found" when absent.
  StatusOr<TensorInfo> get(std::string_view name) const;
  // As SafetensorsFile::check_intact, for the shard holding `name` (OK when absent: get() says so).
  Status check_intact(std::string_view name) const;
  // As SafetensorsFile::expect, in the tensor's own shard.
  Status expect(std::string_view name, DType dtype, const Shape& shape) const;

 private:
  Checkpoint() = default;
  Status add_file(SafetensorsFile f);

  bool sharded_ = false;
  std::filesystem::path root_;  // the index, or the single file
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor -> files_ index
};

// Sum of the sizes of the checkpoint's files in `dir` (index + shards, or model.safetensors), for
// the memory plan before anything is opened; 0 when they cannot be listed.
uint64_t checkpoint_file_bytes(const std::filesystem::path& dir);

}  // namespace dsa::model
