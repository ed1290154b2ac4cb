// The paged caches of every layer of a model (SPEC.md §2.2–§2.5): per target layer and for the MTP
// layer, one indexer pool and one MLA latent pool, all addressed by the same page ids, in the
// backend's memory (zero-filled: page 0 reads as zeros, §2.5).
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/kernels/common/paged_cache.h"
#include "dsa/runtime/attention_step.h"
#include "dsa/runtime/buffer.h"

namespace dsa::model {

class ModelCaches {
 public:
  ModelCaches(int32_t num_layers, int32_t num_pages, kernels::LatentFormat format);
  Status allocate(kernels::Backend backend);  // once, before layer() is used
  runtime::LayerCaches layer(int32_t l);
  int32_t num_layers() const { return num_layers_; }

 private:
  int32_t num_layers_;
  int32_t num_pages_;
  kernels::LatentFormat format_;
  std::vector<runtime::Buffer<uint8_t>> indexer_, latent_;
};

}  // namespace dsa::model
