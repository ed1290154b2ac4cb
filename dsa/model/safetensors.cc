#include "dsa/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "dsa/model/json_reader.h"

namespace dsa::model {

using nlohmann::json;

namespace {

struct DtypeName {
  std::string_view name;
  DType dtype;
};
constexpr DtypeName kDtypes[] = {{"F32", DType::kF32},
                                 {"BF16", DType::kBF16},
                                 {"F8_E4M3", DType::kE4M3},
                                 {"I32", DType::kI32},
                                 {"U8", DType::kU8}};

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative integer that fits int64 (shape dims and offsets).
bool as_count(const json& v, int64_t* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
  } else if (v.get<int64_t>() < 0) {
    return false;
  }
  *out = v.get<int64_t>();
  return true;
}

// Real tensors have rank <= 4; a longer shape is a corrupt header, not a tensor.
constexpr size_t kMaxRank = 8;

}  // namespace

StatusOr<DType> parse_safetensors_dtype(std::string_view name, std::string_view tensor) {
  for (const DtypeName& d : kDtypes) {
    if (d.name == name) return d.dtype;
  }
  return invalid_argument(clip_for_message(tensor) + ": dtype " + clip_for_message(name) +
                          " is not supported (F32, BF16, F8_E4M3, I32, U8)");
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  // O_NONBLOCK: a FIFO would otherwise block the open until a writer appears.
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return not_found(file + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = not_found(file + ": cannot stat: " + std::strerror(errno));
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(file + ": not a regular file (a directory, FIFO or device)");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return invalid_argument(file + ": " + std::to_string(file_size) +
                            " bytes, shorter than the 8-byte header length");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  if (map == MAP_FAILED) {
    ::close(fd);
    return internal_error(file + ": mmap failed: " + std::strerror(map_errno));
  }
  // Guarded before the header is read: the file may shrink at any time after the fstat above.
  MappingGuard guard(map, file_size);
  StatusOr<SafetensorsFile> parsed = from_mapping(path, map, file_size);
  if (!parsed.ok()) {
    guard = MappingGuard();  // from_mapping has unmapped the range: stop guarding it at once
    ::close(fd);
    return parsed.status();
  }
  SafetensorsFile f = std::move(*parsed);
  f.file_backed_ = true;
  f.fd_ = fd;
  f.opened_size_ = file_size;
  f.opened_mtime_ns_ = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  f.guard_ = std::move(guard);
  if (f.guard_.faults() > 0) {
    return failed_precondition(file +
                               ": reading the header faulted (SIGBUS): the file was "
                               "truncated while dsa opened it");
  }
  // The loader reads each shard front to back once: let the kernel read ahead.
  ::madvise(map, file_size, MADV_SEQUENTIAL);
  return f;
}

StatusOr<SafetensorsFile> SafetensorsFile::from_mapping(const std::filesystem::path& path,
                                                        void* map, uint64_t file_size) {
  const std::string file = path.string();
  SafetensorsFile f;
  f.path_ = path;
  f.map_ = map;
  f.map_size_ = file_size;
  const auto* bytes = static_cast<const unsigned char*>(map);
  const uint64_t header_len = read_u64_le(bytes);
  if (header_len > kMaxSafetensorsHeaderBytes || header_len > file_size - 8) {
    return invalid_argument(file + ": header length " + std::to_string(header_len) +
                            " exceeds the file (" + std::to_string(file_size) +
                            " bytes) or the limit of " +
                            std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  f.data_ = bytes + 8 + header_len;
  std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_len);
  Status s = f.parse_header(header, file_size - 8 - header_len);
  if (!s.ok()) return s.with_context(file);
  return f;
}

StatusOr<SafetensorsFile> SafetensorsFile::from_image(
    const std::filesystem::path& label, size_t size,
    const std::function<void(unsigned char*)>& fill) {
  const std::string file = label.string();
  if (size < 8) return invalid_argument(file + ": an image shorter than the 8-byte length");
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    return resource_exhausted(file + ": mmap of " + std::to_string(size) +
                              " bytes failed: " + std::strerror(errno));
  }
  fill(static_cast<unsigned char*>(map));
  ::mprotect(map, size, PROT_READ);  // as a file's mapping: nothing writes it after this
  return from_mapping(label, map, size);
}

StatusOr<SafetensorsFile::Entry> SafetensorsFile::parse_entry(const std::string& name,
                                                              const json& entry,
                                                              uint64_t data_size) {
  const std::string where = clip_for_message(name) + ": ";
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    return invalid_argument(where + json_for_message(entry) +
                            ": must be {dtype, shape, data_offsets}");
  }
  const json& jd = entry["dtype"];
  if (!jd.is_string()) {
    return invalid_argument(where + "dtype " + json_for_message(jd) + " is not a string");
  }
  DSA_ASSIGN_OR_RETURN(DType dtype, parse_safetensors_dtype(jd.get<std::string>(), name));

  Entry e{dtype, {}, 0, 0};
  const json& js = entry["shape"];
  if (!js.is_array()) {
    return invalid_argument(where + "shape " + json_for_message(js) + " is not an array");
  }
  if (js.size() > kMaxRank) {
    return invalid_argument(where + "shape " + json_for_message(js) + " has " +
                            std::to_string(js.size()) + " dimensions, more than " +
                            std::to_string(kMaxRank));
  }
  // numel sizes the data; `span`, the product of the non-zero dims, must fit as well, since code
  // that multiplies two dims of an empty tensor would otherwise overflow.
  uint64_t numel = 1;
  int64_t span = 1;
  for (const json& d : js) {
    int64_t dim;
    if (!as_count(d, &dim)) {
      return invalid_argument(where + "shape " + json_for_message(js) + " must hold integers >= 0");
    }
    e.shape.push_back(dim);
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel) ||
        __builtin_mul_overflow(span, std::max<int64_t>(dim, 1), &span)) {
      return invalid_argument(where + "shape " + json_for_message(js) + " overflows");
    }
  }
  const json& jo = entry["data_offsets"];
  int64_t begin, end;
  if (!jo.is_array() || jo.size() != 2 || !as_count(jo[0], &begin) || !as_count(jo[1], &end)) {
    return invalid_argument(where + "data_offsets " + json_for_message(jo) +
                            " must be [begin, end] with integers >= 0");
  }
  e.begin = static_cast<uint64_t>(begin);
  e.end = static_cast<uint64_t>(end);
  if (e.begin > e.end || e.end > data_size) {
    return invalid_argument(where + "data_offsets " + json_for_message(jo) +
                            " must satisfy begin <= end <= data size " + std::to_string(data_size));
  }
  uint64_t expected;
  if (__builtin_mul_overflow(numel, dtype_size(dtype), &expected) || e.end - e.begin != expected) {
    return invalid_argument(where + "data_offsets " + json_for_message(jo) + " span " +
                            std::to_string(e.end - e.begin) + " bytes, but " +
                            std::string(safetensors_dtype_name(dtype)) + " " +
                            shape_string(e.shape) + " needs " + std::to_string(expected));
  }
  return e;
}

Status SafetensorsFile::parse_header(std::string_view header, uint64_t data_size) {
  // parse_json refuses a name given twice: nlohmann would keep the last, and a second entry for
  // a name is a lying header.
  DSA_ASSIGN_OR_RETURN(json root, parse_json(header, "header"));
  if (!root.is_object()) return invalid_argument("header must be a JSON object");

  std::vector<std::pair<uint64_t, std::string>> by_begin;
  for (auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return invalid_argument("__metadata__ must be an object");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) {
          return invalid_argument("__metadata__." + clip_for_message(k) + " must be a string");
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    DSA_ASSIGN_OR_RETURN(Entry e, parse_entry(name, entry, data_size));
    if (e.end > e.begin) by_begin.emplace_back(e.begin, name);
    tensors_.emplace(name, std::move(e));
  }
  return check_tiling(by_begin, data_size);
}

Status SafetensorsFile::check_tiling(std::vector<std::pair<uint64_t, std::string>>& by_begin,
                                     uint64_t data_size) const {
  // The non-empty tensors, sorted by start, must tile the data section exactly, as the
  // reference implementation requires: an overlap aliases two tensors, and a gap or a tail means
  // the offsets or the header length are off (a header length one short still parses, thanks to
  // the space padding, and shifts every tensor by a byte).
  std::sort(by_begin.begin(), by_begin.end());
  uint64_t cursor = 0;
  std::string previous;
  for (const auto& [begin, name] : by_begin) {
    const Entry& e = tensors_.find(name)->second;
    if (begin < cursor) {
      const Entry& prev = tensors_.find(previous)->second;
      return invalid_argument(clip_for_message(name) + ": data_offsets [" + std::to_string(begin) +
                              ", ...] overlap " + clip_for_message(previous) + " [" +
                              std::to_string(prev.begin) + ", " + std::to_string(prev.end) + ")");
    }
    if (begin > cursor) {
      return invalid_argument("data bytes [" + std::to_string(cursor) + ", " +
                              std::to_string(begin) + "), before " + clip_for_message(name) +
                              ", belong to no tensor (one missing from the header?)");
    }
    cursor = e.end;
    previous = name;
  }
  if (cursor != data_size) {
    return invalid_argument("the tensors end at data byte " + std::to_string(cursor) +
                            ", but the data section has " + std::to_string(data_size) +
                            " bytes (is the header length right?)");
  }
  return ok_status();
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    file_backed_ = std::exchange(other.file_backed_, false);
    fd_ = std::exchange(other.fd_, -1);
    opened_size_ = other.opened_size_;
    opened_mtime_ns_ = other.opened_mtime_ns_;
    guard_ = std::move(other.guard_);
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::drop_pages(const TensorInfo& t) const {
  // An anonymous image has no file to read the pages back from: MADV_DONTNEED would zero them.
  if (!file_backed_ || t.nbytes == 0) return;
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + t.nbytes) / page * page;
  const auto* map = static_cast<const unsigned char*>(map_);
  // Only whole pages of this file's mapping that the tensor alone covers (a neighbour may still
  // be read from a shared page; the advice is dropped silently when it does not apply).
  if (last <= first || begin < uintptr_t(map) || begin + t.nbytes > uintptr_t(map + map_size_)) {
    return;
  }
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

int64_t SafetensorsFile::read_at(uint64_t offset, void* dst, size_t n) const {
  if (!file_backed_ || fd_ < 0) return 0;
  for (;;) {
    const ssize_t got = ::pread(fd_, dst, n, off_t(offset));
    if (got >= 0 || errno != EINTR) return int64_t(got);
  }
}

Status SafetensorsFile::check_intact(std::string_view tensor) const {
  if (!file_backed_) return ok_status();
  const std::string where = path_.string() + ": tensor " + clip_for_message(tensor) + ": ";
  if (guard_.faults() > 0) {
    return failed_precondition(
        where + "reading the mapping faulted (SIGBUS) " + std::to_string(guard_.faults()) +
        " time(s): the file was truncated while dsa loaded it (or the disk failed); the load "
        "stopped, nothing read from it is used");
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    return internal_error(where + "cannot stat the open file: " + std::strerror(errno));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size != opened_size_) {
    return failed_precondition(where + "the file changed size during the load (" +
                               std::to_string(opened_size_) + " bytes when opened, " +
                               std::to_string(size) +
                               " now): truncated or rewritten while dsa read it");
  }
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (mtime != opened_mtime_ns_) {
    return failed_precondition(where +
                               "the file was modified during the load (its modification time "
                               "changed since it was opened): rewritten while dsa read it");
  }
  return ok_status();
}

void SafetensorsFile::unmap() {
  guard_ = MappingGuard();  // unguarded before the range can be reused by another mapping
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
  data_ = nullptr;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) out.push_back(name);
  return out;
}

StatusOr<TensorInfo> SafetensorsFile::get(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return not_found(path_.string() + ": tensor " + clip_for_message(name) + " not found");
  }
  const Entry& e = it->second;
  return TensorInfo{it->first, e.dtype, e.shape, data_ + e.begin,
                    static_cast<size_t>(e.end - e.begin)};
}

Status SafetensorsFile::expect(std::string_view name, DType dtype, const Shape& shape) const {
  DSA_ASSIGN_OR_RETURN(TensorInfo t, get(name));
  if (t.dtype == dtype && t.shape == shape) return ok_status();
  return invalid_argument(path_.string() + ": " + clip_for_message(name) + ": expected " +
                          std::string(dtype_name(dtype)) + " " + shape_string(shape) + ", got " +
                          std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape));
}

}  // namespace dsa::model
