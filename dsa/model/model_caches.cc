#include "dsa/model/model_caches.h"

namespace dsa::model {

ModelCaches::ModelCaches(int32_t num_layers, int32_t num_pages, kernels::LatentFormat format)
    : num_pages_(num_pages), format_(format) {
  const size_t indexer_bytes = size_t(num_pages) * size_t(kernels::indexer_page_bytes(
                                                       kernels::kPageSize, kernels::kIndexHeadDim));
  const size_t latent_bytes =
      size_t(num_pages) * kernels::kPageSize * size_t(kernels::latent_bytes_per_token(format));
  for (int32_t l = 0; l < num_layers; ++l) {
    indexer_.emplace_back(indexer_bytes, 0);  // zero-filled: page 0 reads as zeros (§2.5)
    latent_.emplace_back(latent_bytes, 0);
  }
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
