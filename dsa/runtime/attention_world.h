// A test world for the attention step: caches for several layers, a page manager, and per-token
// inputs that are a pure function of (layer, request id, position), so the same token gets the same
// inputs in any forward composition (verify vs sequential decodes, padded vs unpadded).
#pragma once

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "dsa/runtime/attention_step.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/page_pool.h"
#include "dsa/testing/pools.h"

namespace dsa::runtime::testing {

inline constexpr int32_t kIndexHeads = 16;
inline constexpr int32_t kMlaHeads = 16;

struct TokenKey {
  int32_t layer, request, position;
};

// Per-token inputs, deterministic in (seed, layer, request, position).
inline void token_inputs(uint64_t seed, TokenKey t, uint8_t* q_index, float* w, bf16* k_index,
                         bf16* kv, bf16* q_mla) {
  std::mt19937_64 g(seed ^ (uint64_t(t.layer) << 48) ^ (uint64_t(t.request) << 32) ^
                    uint64_t(t.position) * 0x9E3779B97F4A7C15ull);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int i = 0; i < kIndexHeads * 128; ++i) q_index[i] = float_to_e4m3(nd(g) * 2.f).bits;
  for (int i = 0; i < kIndexHeads; ++i) w[i] = nd(g) * 0.1f;
  for (int i = 0; i < 128; ++i) k_index[i] = float_to_bf16(nd(g));
  for (int i = 0; i < 576; ++i) kv[i] = float_to_bf16(nd(g));
  for (int i = 0; i < kMlaHeads * 576; ++i) q_mla[i] = float_to_bf16(nd(g) * 0.3f);
}

// Inputs and outputs of one forward, sized for rows_pad rows.
struct StepBuffers {
  std::vector<uint8_t> q_index;
  std::vector<float> w;
  std::vector<bf16> k_index, kv, q_mla;
  std::vector<float> logits;
  std::vector<int32_t> topk;
  std::vector<bf16> out;
  std::vector<float> lse;

  // Fills real rows from token_inputs and padded rows with NaN junk (which must stay inert).
  void fill(uint64_t seed, int32_t layer, const ForwardMetadata& m, const std::vector<int32_t>& ids,
            int64_t ld, int32_t k) {
    const int32_t rows = m.header.rows_pad;
    q_index.assign(size_t(rows) * kIndexHeads * 128, 0x7F);  // e4m3 NaN
    w.assign(size_t(rows) * kIndexHeads, std::numeric_limits<float>::quiet_NaN());
    k_index.assign(size_t(rows) * 128, float_to_bf16(NAN));
    kv.assign(size_t(rows) * 576, float_to_bf16(NAN));
    q_mla.assign(size_t(rows) * kMlaHeads * 576, float_to_bf16(NAN));
    for (int32_t r = 0; r < m.header.rows; ++r) {
      TokenKey t{layer, ids[size_t(m.row_req[size_t(r)])], m.positions[size_t(r)]};
      token_inputs(seed, t, &q_index[size_t(r) * kIndexHeads * 128], &w[size_t(r) * kIndexHeads],
                   &k_index[size_t(r) * 128], &kv[size_t(r) * 576],
                   &q_mla[size_t(r) * kMlaHeads * 576]);
    }
    logits.assign(size_t(rows) * size_t(ld), -12345.f);
    topk.assign(size_t(rows) * size_t(k), kernels::kPoisonI32);
    out.assign(size_t(rows) * kMlaHeads * 512, float_to_bf16(-7.f));
    lse.assign(size_t(rows) * kMlaHeads, -7.f);
  }
  AttentionInputs inputs() const {
    return {q_index.data(), w.data(), k_index.data(), kv.data(), q_mla.data()};
  }
  AttentionOutputs outputs() { return {logits.data(), topk.data(), out.data(), lse.data()}; }
};

struct LayerPools {
  dsa::testing::IndexerPoolBuffer indexer;
  dsa::testing::LatentPoolBuffer latent;
  LayerPools(int32_t pages, kernels::LatentFormat f) : indexer(pages), latent(pages, f) {}
  LayerCaches caches() { return {indexer.pool(), latent.pool()}; }
};

struct AttentionWorld {
  MetadataConfig config;
  PagedCacheManager pages;
  std::vector<std::unique_ptr<LayerPools>> layers;
  AttentionStep step;
  uint64_t seed;

  AttentionWorld(const MetadataConfig& c, int32_t num_layers, kernels::LatentFormat format,
                 uint64_t s, const kernels::OpTable& ops = kernels::cpu_ops())
      : config(c),
        pages(c.num_pages, c.num_rows, c.page_table_width),
        step(ops, c, AttentionDims{kIndexHeads, kMlaHeads, 0.1656269f}),
        seed(s) {
    for (int i = 0; i < num_layers; ++i)
      layers.push_back(std::make_unique<LayerPools>(c.num_pages, format));
  }

  // Builds `batch` and runs every layer; `ids` names each real request for the token inputs.
  // Returns each layer's buffers.
  Status run(const ForwardBatch& batch, const std::vector<int32_t>& ids,
             std::vector<StepBuffers>* results, ForwardMetadata* meta_out = nullptr) {
    ForwardMetadata m(config);
    DSA_RETURN_IF_ERROR(build_forward_metadata(batch, config, pages.page_table(), m));
    results->assign(layers.size(), StepBuffers{});
    for (size_t l = 0; l < layers.size(); ++l) {
      StepBuffers& b = (*results)[l];
      b.fill(seed, int32_t(l), m, ids, step.logits_ld(), config.topk);
      DSA_RETURN_IF_ERROR(
          step.run_layer(m, pages.page_table(), layers[l]->caches(), b.inputs(), b.outputs()));
    }
    if (meta_out) *meta_out = m;
    return ok_status();
  }
};

}  // namespace dsa::runtime::testing
