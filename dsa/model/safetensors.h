// SafetensorsFile: a read-only, memory-mapped .safetensors file with a fully validated header.
// Hand-written (ARCHITECTURE.md §8) because the format is small and the validation is the point:
// a header that lies (offsets beyond the data, overlapping tensors, gaps, sizes that disagree
// with dtype x shape) must become a Status here, not an out-of-bounds read in a kernel later.
//
// Layout: u64 little-endian N | N bytes of JSON header | data. The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the start of the data);
// the optional "__metadata__" maps strings to strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/core/tensor.h"
#include "dsa/model/mapping_guard.h"

namespace dsa::model {

// The header may not exceed this; real checkpoints use a few MB, and a larger value is more
// likely a corrupt length than a header worth parsing.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull * 1000 * 1000;

// Maps a safetensors dtype string to DType: "F32", "BF16", "F8_E4M3", "I32", "U8". Every other
// name (F16, F64, I64, BOOL, F8_E5M2, ...) is kInvalidArgument naming the tensor and the dtype.
StatusOr<DType> parse_safetensors_dtype(std::string_view name, std::string_view tensor);
// The inverse, for writers and messages.
std::string_view safetensors_dtype_name(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  // Points into the mapping; valid while the SafetensorsFile lives. Not necessarily aligned to
  // the dtype (the format does not require writers to pad), so read it with memcpy.
  const void* data = nullptr;
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` and validates the header (see the file comment). kNotFound when it cannot be
  // opened; kInvalidArgument, naming the file, for any malformed header.
  static StatusOr<SafetensorsFile> open(const std::filesystem::path& path);
  // A file image built in memory (random weights, model/random_weights.h): `fill` writes the
  // `size` bytes of a whole file (length, header, data) into a fresh anonymous mapping, which is
  // then made read-only and validated exactly as open() validates a file. `label` names it in
  // messages.
  static StatusOr<SafetensorsFile> from_image(const std::filesystem::path& label, size_t size,
                                              const std::function<void(unsigned char*)>& fill);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  // Tensor names in sorted order.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const { return tensors_.count(name) != 0; }
  size_t size() const { return tensors_.size(); }
  // Bytes of the data section (the file less the 8-byte length and the header).
  uint64_t data_bytes() const {
    return map_size_ - static_cast<size_t>(data_ - static_cast<const unsigned char*>(map_));
  }
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }

  // kNotFound "<file>: tensor <name> not found" when absent.
  StatusOr<TensorInfo> get(std::string_view name) const;
  // The loader has consumed `t` (a tensor of this file): its whole pages leave this process's
  // resident set (MADV_DONTNEED; a later read faults them back in from the file), so streaming a
  // checkpoint never keeps the shards resident. A no-op for an in-memory image.
  void drop_pages(const TensorInfo& t) const;
  // The file is still the one that was mapped (issue 16): the same size and modification time as
  // at open(), and no read of the mapping has faulted (MappingGuard: the file shrank under it).
  // The loader asks before and after reading each tensor; kFailedPrecondition
  // "<file>: tensor <name>: ..." saying what changed. Always OK for an in-memory image.
  Status check_intact(std::string_view tensor) const;
  // Up to `n` bytes of the file from byte `offset` into `dst` by pread (not through the mapping):
  // the bytes read, 0 at the end or for an in-memory image, -1 on an error. For reading ahead
  // (shard_read_ahead.h), which only warms the page cache.
  int64_t read_at(uint64_t offset, void* dst, size_t n) const;
  // kNotFound as get(); kInvalidArgument "<file>: <name>: expected bf16 [256], got f32 [255]".
  Status expect(std::string_view name, DType dtype, const Shape& shape) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin;  // byte offsets into the data section
    uint64_t end;
  };
  SafetensorsFile() = default;
  // Takes the mapping (unmapped by the destructor, also on error) and validates it.
  static StatusOr<SafetensorsFile> from_mapping(const std::filesystem::path& path, void* map,
                                                uint64_t size);
  Status parse_header(std::string_view header, uint64_t data_size);
  // The non-empty tensors as (begin, name) must cover [0, data_size) without gap or overlap.
  Status check_tiling(std::vector<std::pair<uint64_t, std::string>>& by_begin,
                      uint64_t data_size) const;
  // One tensor's {dtype, shape, data_offsets}, checked against the data size.
  static StatusOr<Entry> parse_entry(const std::string& name, const nlohmann::json& entry,
                                     uint64_t data_size);
  void unmap();

  std::filesystem::path path_;
  void* map_ = nullptr;  // the whole file, PROT_READ
  size_t map_size_ = 0;
  const unsigned char* data_ = nullptr;  // start of the data section inside map_
  bool file_backed_ = false;             // open(), not from_image(): pages can be dropped
  // open() only: the descriptor is kept to fstat the very file that was mapped (a path could
  // since name another one); its size and mtime then.
  int fd_ = -1;
  uint64_t opened_size_ = 0;
  int64_t opened_mtime_ns_ = 0;
  MappingGuard guard_;
  std::map<std::string, Entry, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

}  // namespace dsa::model
