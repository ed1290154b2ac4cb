#include "dsa/dist/gather_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace dsa::dist {

StatusOr<std::vector<std::string>> all_gather_text(Collective& group, std::string_view mine) {
  const auto world = static_cast<size_t>(group.world_size());
  const auto me = static_cast<size_t>(group.rank());
  std::vector<int64_t> lengths(world, 0);
  lengths[me] = static_cast<int64_t>(mine.size());
  DSA_RETURN_IF_ERROR(group.all_reduce(lengths, ReduceOp::kMax));
  std::vector<size_t> begin(world + 1, 0);  // byte offsets of each rank's text in the whole
  for (size_t r = 0; r < world; ++r) {
    if (lengths[r] < 0 || static_cast<size_t>(lengths[r]) > kMaxGatherBytesPerRank) {
      return invalid_argument(fmt::format("all_gather_text: rank {} sends {} bytes: at most {}", r,
                                          lengths[r], kMaxGatherBytesPerRank));
    }
    begin[r + 1] = begin[r] + static_cast<size_t>(lengths[r]);
  }
  const size_t total = begin[world];
  std::string whole(total, '\0');
  std::vector<int64_t> chunk;
  constexpr size_t kChunkBytes = kMaxAllReduceValues * sizeof(int64_t);
  for (size_t at = 0; at < total; at += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, total - at);
    chunk.assign((n + sizeof(int64_t) - 1) / sizeof(int64_t), 0);
    // The part of this rank's range [begin[me], begin[me + 1]) inside this chunk [at, at + n).
    const size_t lo = std::max(at, begin[me]);
    const size_t hi = std::min(at + n, begin[me + 1]);
    if (lo < hi) {
      std::memcpy(reinterpret_cast<char*>(chunk.data()) + (lo - at), mine.data() + (lo - begin[me]),
                  hi - lo);
    }
    DSA_RETURN_IF_ERROR(group.all_reduce(chunk, ReduceOp::kSum));
    std::memcpy(whole.data() + at, chunk.data(), n);
  }
  std::vector<std::string> out(world);
  for (size_t r = 0; r < world; ++r) out[r] = whole.substr(begin[r], begin[r + 1] - begin[r]);
  return out;
}

}  // namespace dsa::dist
