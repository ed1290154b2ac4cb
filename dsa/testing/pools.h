// Owning buffers for the paged caches and the page table, for tests and `dsa check`.
// Pools are zero-filled like real allocations (SPEC.md §2.5); poison_pages() fills every page but
// page 0 with a pattern so a test proves which bytes an op wrote or read.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/kernels/common/paged_cache.h"
#include "dsa/testing/random.h"

namespace dsa::testing {

class IndexerPoolBuffer {
 public:
  explicit IndexerPoolBuffer(int32_t num_pages);
  kernels::IndexerPool pool() { return pool_; }
  std::vector<uint8_t>& bytes() { return bytes_; }
  void poison_pages(uint8_t pattern = 0xA5);
  // Fills every slot of pages [1, num_pages) with random keys quantised by the §2.1 rule.
  void fill_random(Rng& rng);
  const uint8_t* values(int32_t slot) const;
  float scale(int32_t slot) const;

 private:
  std::vector<uint8_t> bytes_;
  kernels::IndexerPool pool_;
};

class LatentPoolBuffer {
 public:
  LatentPoolBuffer(int32_t num_pages, kernels::LatentFormat format);
  kernels::LatentPool pool() { return pool_; }
  std::vector<uint8_t>& bytes() { return bytes_; }
  // Fills every slot of pages [1, num_pages) with random rows (FP8-656: power-of-two scales).
  void fill_random(Rng& rng, float stddev = 1.f);
  // The dequantised row of `slot` (576 floats).
  std::vector<float> row(int32_t slot) const;

 private:
  std::vector<uint8_t> bytes_;
  kernels::LatentPool pool_;
};

class PageTableBuffer {
 public:
  // Row 0 is reserved (all zeros); other entries start at 0 (page 0) as unallocated.
  PageTableBuffer(int32_t num_rows, int32_t width, int32_t num_pages);
  kernels::PageTable table() const;
  int32_t& at(int32_t row, int32_t col) { return data_[size_t(row) * width_ + col]; }
  // Gives `row` its first ceil(len / P) pages, drawn from `free_pages` (consumed from the back).
  void assign(int32_t row, int32_t len, std::vector<int32_t>& free_pages);

 private:
  std::vector<int32_t> data_;
  int32_t num_rows_, width_, num_pages_;
};

}  // namespace dsa::testing
