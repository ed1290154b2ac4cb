#include "dsa/testing/pools.h"

#include <cstring>

#include "dsa/core/check.h"
#include "dsa/core/fp8_quant.h"

namespace dsa::testing {

using kernels::kPageSize;

IndexerPoolBuffer::IndexerPoolBuffer(int32_t num_pages)
    : bytes_(size_t(num_pages) * kernels::indexer_page_bytes(kPageSize, kernels::kIndexHeadDim)) {
  pool_.data = bytes_.data();
  pool_.num_pages = num_pages;
}

void IndexerPoolBuffer::poison_pages(uint8_t pattern) {
  size_t page = size_t(pool_.page_stride_bytes);
  std::memset(bytes_.data() + page, pattern, bytes_.size() - page);
}

void IndexerPoolBuffer::fill_random(Rng& rng) {
  float x[kernels::kIndexHeadDim];
  uint8_t q[kernels::kIndexHeadDim];
  for (int32_t s = kPageSize; s < pool_.num_pages * kPageSize; ++s) {
    float stddev = rng.uniform(0.1f, 4.f);
    for (auto& v : x) v = bf16_to_float(float_to_bf16(rng.normal(0.f, stddev)));
    float scale = quantize_block_pow2(x, kernels::kIndexHeadDim, q);
    std::memcpy(bytes_.data() + kernels::indexer_value_offset(pool_, s), q, sizeof(q));
    std::memcpy(bytes_.data() + kernels::indexer_scale_offset(pool_, s), &scale, 4);
  }
}

const uint8_t* IndexerPoolBuffer::values(int32_t slot) const {
  return bytes_.data() + kernels::indexer_value_offset(pool_, slot);
}

float IndexerPoolBuffer::scale(int32_t slot) const {
  float s;
  std::memcpy(&s, bytes_.data() + kernels::indexer_scale_offset(pool_, slot), 4);
  return s;
}

LatentPoolBuffer::LatentPoolBuffer(int32_t num_pages, kernels::LatentFormat format)
    : bytes_(size_t(num_pages) * kPageSize * kernels::latent_bytes_per_token(format)) {
  pool_.data = bytes_.data();
  pool_.format = format;
  pool_.num_pages = num_pages;
}

void LatentPoolBuffer::fill_random(Rng& rng, float stddev) {
  const int32_t bytes = kernels::latent_bytes_per_token(pool_.format);
  for (int32_t s = kPageSize; s < pool_.num_pages * kPageSize; ++s) {
    uint8_t* row = bytes_.data() + int64_t{s} * bytes;
    float x[kernels::kQkDim];
    for (auto& v : x) v = round_to_bf16(rng.normal(0.f, stddev));
    if (pool_.format == kernels::LatentFormat::kBf16) {
      for (int t = 0; t < kernels::kQkDim; ++t) {
        bf16 h = float_to_bf16(x[t]);
        std::memcpy(row + 2 * t, &h, 2);
      }
      continue;
    }
    for (int tile = 0; tile < kernels::kLatentDim / kernels::kLatentTile; ++tile) {
      float scale = quantize_block_pow2(x + tile * kernels::kLatentTile, kernels::kLatentTile,
                                        row + tile * kernels::kLatentTile);
      std::memcpy(row + kernels::kLatentDim + 4 * tile, &scale, 4);
    }
    for (int t = 0; t < kernels::kRopeDim; ++t) {
      bf16 h = float_to_bf16(x[kernels::kLatentDim + t]);
      std::memcpy(row + kernels::kLatentDim + 16 + 2 * t, &h, 2);
    }
  }
}

std::vector<float> LatentPoolBuffer::row(int32_t slot) const {
  std::vector<float> out(kernels::kQkDim);
  kernels::load_latent_row(pool_, slot, out.data());
  return out;
}

PageTableBuffer::PageTableBuffer(int32_t num_rows, int32_t width, int32_t num_pages)
    : data_(size_t(num_rows) * width, 0),
      num_rows_(num_rows),
      width_(width),
      num_pages_(num_pages) {}

kernels::PageTable PageTableBuffer::table() const {
  return kernels::PageTable{data_.data(), num_rows_, width_, num_pages_};
}

void PageTableBuffer::assign(int32_t row, int32_t len, std::vector<int32_t>& free_pages) {
  DSA_CHECK(row > 0 && row < num_rows_);
  int32_t pages = (len + kPageSize - 1) / kPageSize;
  DSA_CHECK(pages <= width_ && pages <= int32_t(free_pages.size()));
  for (int32_t i = 0; i < pages; ++i) {
    at(row, i) = free_pages.back();
    free_pages.pop_back();
  }
}

}  // namespace dsa::testing
