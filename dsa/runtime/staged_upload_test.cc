// StagedUpload on the CPU backend, both ways: straight copies (the CPU load) and through the two
// staging slots (stage_on_host: the CUDA path's chunking and slot reuse, run on the host). Bytes
// arrive intact, and the counted staging never exceeds its bound.
#include "dsa/runtime/staged_upload.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsa/runtime/buffer.h"

namespace dsa::runtime {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 131 + salt + (i >> 8));
  return v;
}

void roundtrip(bool staged, ReadOptions read = {}) {
  constexpr size_t kChunk = 4096;
  auto up = StagedUpload::create(kernels::Backend::kCpu, kChunk, staged, read);
  ASSERT_TRUE(up.ok()) << up.status().to_string();
  // Sizes around the chunk: several chunks with a remainder, exactly one, less than one, empty.
  const std::vector<size_t> sizes = {3 * kChunk + 17, kChunk, 100, 0, 2 * kChunk};
  std::vector<std::vector<uint8_t>> src;
  std::vector<Buffer<uint8_t>> dst;
  uint64_t want_chunks = 0, want_bytes = 0, want_pieces = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    src.push_back(pattern(sizes[i], uint8_t(i)));
    auto b = Buffer<uint8_t>::alloc(kernels::Backend::kCpu, sizes[i]);
    ASSERT_TRUE(b.ok());
    dst.push_back(std::move(*b));
    ASSERT_TRUE(up->copy(dst.back().data(), src.back().data(), sizes[i]).ok());
    want_chunks += (sizes[i] + kChunk - 1) / kChunk;
    want_bytes += sizes[i];
    for (size_t off = 0; off < sizes[i]; off += kChunk) {
      const size_t n = std::min(kChunk, sizes[i] - off);
      want_pieces +=
          std::min<size_t>(size_t(read.readers), (n + read.piece_bytes - 1) / read.piece_bytes);
    }
  }
  ASSERT_TRUE(up->finish().ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (size_t j = 0; j < sizes[i]; ++j) ASSERT_EQ(dst[i].data()[j], src[i][j]) << i << " " << j;
  }
  const StagingStats& s = up->stats();
  EXPECT_EQ(s.bytes, want_bytes);
  EXPECT_EQ(s.chunks, want_chunks);
  EXPECT_EQ(s.max_chunk, kChunk);
  EXPECT_EQ(s.pieces, want_pieces);
  EXPECT_LE(s.max_slot_fill, s.slot_bytes);
  if (staged) {
    EXPECT_EQ(s.slot_bytes, kChunk);
    EXPECT_EQ(s.staging_bytes, 2 * kChunk);
    EXPECT_EQ(s.max_slot_fill, kChunk);  // the slots were really used
  } else {
    EXPECT_EQ(s.staging_bytes, 0u);
    EXPECT_EQ(s.max_slot_fill, 0u);
  }
}

TEST(StagedUpload, StraightCopiesOnTheHost) { roundtrip(false); }
TEST(StagedUpload, ThroughTwoBoundedSlots) { roundtrip(true); }

// Several readers per chunk (pieces of at least 1000 bytes): a 4 KiB chunk is read as 4 pieces
// of 1 KiB by 4 threads (3 by 3 through the slots), the 100- and 17-byte chunks whole.
TEST(StagedUpload, SeveralReadersStraight) {
  roundtrip(false, {.readers = 4, .piece_bytes = 1000});
}
TEST(StagedUpload, SeveralReadersThroughSlots) {
  roundtrip(true, {.readers = 3, .piece_bytes = 1000});
}

TEST(StagedUpload, ReaderCountOutOfRangeIsRefused) {
  for (int readers : {0, -1, kMaxReaders + 1}) {
    auto up = StagedUpload::create(kernels::Backend::kCpu, 4096, false, {.readers = readers});
    ASSERT_FALSE(up.ok()) << readers;
    EXPECT_NE(up.status().message().find(fmt::format("readers = {}", readers)), std::string::npos)
        << up.status().to_string();
  }
  auto zero = StagedUpload::create(kernels::Backend::kCpu, 4096, false, {.piece_bytes = 0});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("piece_bytes = 0"), std::string::npos);
}

TEST(StagedUpload, ZeroChunkIsRefused) {
  auto up = StagedUpload::create(kernels::Backend::kCpu, 0);
  ASSERT_FALSE(up.ok());
  EXPECT_NE(up.status().message().find("chunk_bytes = 0"), std::string::npos);
}

}  // namespace
}  // namespace dsa::runtime
