#include "dsa/model/model_caches.h"

namespace dsa::model {

ModelCaches::ModelCaches(int32_t num_layers, int32_t num_pages, kernels::LatentFormat format)
    : num_layers_(num_layers), num_pages_(num_pages), format_(format) {}

Status ModelCaches::allocate(kernels::Backend backend) {
  const size_t indexer_bytes =
      size_t(num_pages_) *
      size_t(kernels::indexer_page_bytes(kernels::kPageSize, kernels::kIndexHeadDim));
  const size_t latent_bytes =
      size_t(num_pages_) * kernels::kPageSize * size_t(kernels::latent_bytes_per_token(format_));
  indexer_.clear();
  latent_.clear();
  for (int32_t l = 0; l < num_layers_; ++l) {
    DSA_ASSIGN_OR_RETURN(auto ix, runtime::Buffer<uint8_t>::alloc(backend, indexer_bytes));
    DSA_ASSIGN_OR_RETURN(auto lat, runtime::Buffer<uint8_t>::alloc(backend, latent_bytes));
    indexer_.push_back(std::move(ix));
    latent_.push_back(std::move(lat));
  }
  return ok_status();
}

runtime::LayerCaches ModelCaches::layer(int32_t l) {
  runtime::LayerCaches c;
  c.indexer.data = indexer_[size_t(l)].data();
  c.indexer.num_pages = num_pages_;
  c.latent.data = latent_[size_t(l)].data();
  c.latent.format = format_;
  c.latent.num_pages = num_pages_;
  return c;
}

}  // namespace dsa::model
