// Views of the paged caches and the page table (SPEC.md §2.2–§2.5), with the byte arithmetic
// written once for the CPU references and the CUDA kernels.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/host_device.h"

namespace dsa::kernels {

inline constexpr int32_t kPageSize = 64;                 // P: tokens per page, every pool
inline constexpr int32_t kIndexHeadDim = 128;            // D_i
inline constexpr int32_t kLatentDim = 512;               // D_c: normalised latent c
inline constexpr int32_t kRopeDim = 64;                  // D_r: roped key part k_pe
inline constexpr int32_t kQkDim = 576;                   // D_qk = D_c + D_r
inline constexpr int32_t kVDim = 512;                    // D_v
inline constexpr int32_t kLatentTile = 128;              // FP8-656 quantisation tile (4 per row)
inline constexpr int32_t kFp8LatentBytes = 656;          // per token, §2.4
inline constexpr int32_t kBf16LatentBytes = kQkDim * 2;  // 1152, §2.3
inline constexpr int32_t kMaxTopk = 2048;

// Indexer key pool of one layer (§2.2): page p at data + p * page_stride_bytes; inside a page
// P * D_i e4m3 values token-major, then P fp32 scales.
struct IndexerPool {
  uint8_t* data = nullptr;  // [num_pages, P * (D_i + 4)] bytes
  int32_t num_pages = 0;
  int32_t page_size = kPageSize;
  int32_t head_dim = kIndexHeadDim;
  int64_t page_stride_bytes = int64_t{kPageSize} * (kIndexHeadDim + 4);
};

DSA_HD int64_t indexer_page_bytes(int32_t page_size, int32_t head_dim) {
  return int64_t{page_size} * (head_dim + 4);
}
// Byte offset of the e4m3 values of `slot` inside the pool.
DSA_HD int64_t indexer_value_offset(const IndexerPool& pool, int32_t slot) {
  int32_t page = slot / pool.page_size, o = slot % pool.page_size;
  return page * pool.page_stride_bytes + int64_t{o} * pool.head_dim;
}
// Byte offset of the fp32 scale of `slot` inside the pool.
DSA_HD int64_t indexer_scale_offset(const IndexerPool& pool, int32_t slot) {
  int32_t page = slot / pool.page_size, o = slot % pool.page_size;
  return page * pool.page_stride_bytes + int64_t{pool.page_size} * pool.head_dim + 4 * int64_t{o};
}

enum class LatentFormat { kBf16, kFp8_656 };

// MLA latent pool of one layer: bf16 rows of 576 (§2.3) or FP8-656 rows (§2.4), token-major, so
// slot s sits at data + s * bytes_per_token in both formats.
struct LatentPool {
  uint8_t* data = nullptr;  // [num_pages * P, bytes_per_token]
  LatentFormat format = LatentFormat::kBf16;
  int32_t num_pages = 0;
  int32_t page_size = kPageSize;
};

DSA_HD int32_t latent_bytes_per_token(LatentFormat f) {
  return f == LatentFormat::kBf16 ? kBf16LatentBytes : kFp8LatentBytes;
}
DSA_HD int64_t latent_row_offset(const LatentPool& pool, int32_t slot) {
  return int64_t{slot} * latent_bytes_per_token(pool.format);
}

// Dequantises one cache row into 576 floats: [c (512) | k_pe (64)]. Exact in both formats.
DSA_HD void load_latent_row(const LatentPool& pool, int32_t slot, float* out) {
  const uint8_t* row = pool.data + latent_row_offset(pool, slot);
  if (pool.format == LatentFormat::kBf16) {
    const bf16* v = reinterpret_cast<const bf16*>(row);
    for (int t = 0; t < kQkDim; ++t) out[t] = bf16_to_float(v[t]);
    return;
  }
  const float* scales = reinterpret_cast<const float*>(row + kLatentDim);
  for (int t = 0; t < kLatentDim; ++t) {
    out[t] = e4m3_to_float(e4m3{row[t]}) * scales[t / kLatentTile];
  }
  const bf16* pe = reinterpret_cast<const bf16*>(row + kLatentDim + 16);
  for (int t = 0; t < kRopeDim; ++t) out[kLatentDim + t] = bf16_to_float(pe[t]);
}

// The page table (§2.5): int32 [num_rows, width]; entries are page ids in [0, num_pages).
struct PageTable {
  const int32_t* data = nullptr;  // [num_rows, width]
  int32_t num_rows = 0;           // R_slots
  int32_t width = 0;              // W
  int32_t num_pages = 0;          // pages of the pools it addresses
};

// Global slot of logical position `pos` of the request holding page-table row `row`.
DSA_HD int32_t slot_of_position(const PageTable& pt, int32_t row, int32_t pos, int32_t page_size) {
  int32_t page = pt.data[int64_t{row} * pt.width + pos / page_size];
  return page * page_size + pos % page_size;
}

// len_hash of SPEC.md §3c: sum of uint32(len[r]) * (2r + 1), wrapping mod 2^32.
DSA_HD uint32_t length_hash(const int32_t* len, int64_t count) {
  uint32_t h = 0;
  for (int64_t r = 0; r < count; ++r) {
    h += static_cast<uint32_t>(len[r]) * static_cast<uint32_t>(2 * r + 1);
  }
  return h;
}

// Poison written into unspecified regions by references in checked mode (SPEC.md §1.2).
inline constexpr int32_t kPoisonI32 = 0x7FFFFFFF;

}  // namespace dsa::kernels
