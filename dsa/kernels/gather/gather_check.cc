#include "dsa/kernels/gather/gather_check.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/gather/gather.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {

namespace {
// Independent per-token lookup: the pool byte address of position `pos` of page-table row `row`.
int64_t token_index(const std::vector<int32_t>& table, int32_t W, int32_t row, int32_t pos) {
  return int64_t{table[size_t(row) * W + pos / 64]} * 64 + pos % 64;
}

// Independent FP8-656 dequantisation of one value: e4m3 code times its tile's scale, to bf16.
uint16_t fp8_656_value_bits(const uint8_t* row, int32_t t) {
  if (t >= 512) {
    uint16_t h;
    std::memcpy(&h, row + 528 + 2 * (t - 512), 2);
    return h;
  }
  float scale;
  std::memcpy(&scale, row + 512 + 4 * (t / 128), 4);
  return float_to_bf16(e4m3_to_float(e4m3{row[t]}) * scale).bits;
}
}  // namespace

Status check_gather(IndexerGatherFn indexer_gather, LatentGatherFn latent_gather, int32_t batch,
                    int32_t context_len, uint64_t seed) {
  if (batch < 1 || context_len < 1) {
    return invalid_argument(fmt::format(
        "check_gather: batch = {}, context_len = {}: both must be >= 1", batch, context_len));
  }
  ScopedCheckedMode checked(true);
  testing::Rng rng(seed);
  const int32_t W = (context_len + 63) / 64, num_pages = batch * W + 1;
  testing::IndexerPoolBuffer ipool(num_pages);
  ipool.fill_random(rng);
  testing::LatentPoolBuffer bf16_pool(num_pages, LatentFormat::kBf16);
  bf16_pool.fill_random(rng);
  testing::LatentPoolBuffer fp8_pool(num_pages, LatentFormat::kFp8_656);
  fp8_pool.fill_random(rng);
  testing::PageTableBuffer table(batch + 1, W, num_pages);
  std::vector<int32_t> free_pages = rng.permutation(1, num_pages);
  std::vector<int32_t> req_slot(static_cast<size_t>(batch), 0),
      cu_kv(static_cast<size_t>(batch) + 1, 0);
  std::vector<int32_t> rows = rng.permutation(1, batch + 1);
  for (int32_t b = 0; b < batch; ++b) {
    const auto len =
        b == 0 ? context_len : (rng.randint(0, 3) == 0 ? 0 : int32_t(rng.randint(1, context_len)));
    req_slot[size_t(b)] = len == 0 ? 0 : rows[size_t(b)];
    if (len > 0) table.assign(req_slot[size_t(b)], len, free_pages);
    cu_kv[size_t(b) + 1] = cu_kv[size_t(b)] + len;
  }
  const int32_t total = cu_kv[size_t(batch)];
  std::vector<int32_t> raw_table(size_t(batch + 1) * W);
  for (int32_t r = 0; r <= batch; ++r)
    for (int32_t i = 0; i < W; ++i) raw_table[size_t(r) * W + i] = table.at(r, i);

  std::vector<uint8_t> k8(size_t(total) * 128);
  std::vector<float> kscale(static_cast<size_t>(total));
  IndexerGatherParams ip{req_slot.data(), cu_kv.data(), table.table(), ipool.pool(),
                         batch,           k8.data(),    kscale.data(), total};
  DSA_RETURN_IF_ERROR(indexer_gather(ip));
  std::vector<bf16> kv_bf16(size_t(total) * kQkDim), kv_fp8(size_t(total) * kQkDim);
  LatentGatherParams lp{req_slot.data(), cu_kv.data(),   table.table(), bf16_pool.pool(),
                        batch,           kv_bf16.data(), total};
  DSA_RETURN_IF_ERROR(latent_gather(lp));
  lp.pool = fp8_pool.pool();
  lp.kv = kv_fp8.data();
  DSA_RETURN_IF_ERROR(latent_gather(lp));

  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t pos = 0; pos < cu_kv[size_t(b) + 1] - cu_kv[size_t(b)]; ++pos) {
      const int64_t out = cu_kv[size_t(b)] + pos;
      const int64_t tok = token_index(raw_table, W, req_slot[size_t(b)], pos);
      const uint8_t* ipage = ipool.bytes().data() + (tok / 64) * 8448;
      const bool idx_ok = std::memcmp(&k8[size_t(out) * 128], ipage + (tok % 64) * 128, 128) == 0 &&
                          std::memcmp(&kscale[size_t(out)], ipage + 8192 + 4 * (tok % 64), 4) == 0;
      const bool bf16_ok = std::memcmp(&kv_bf16[size_t(out) * kQkDim],
                                       bf16_pool.bytes().data() + tok * 1152, 1152) == 0;
      bool fp8_ok = true;
      for (int32_t t = 0; t < kQkDim && fp8_ok; ++t) {
        fp8_ok = kv_fp8[size_t(out) * kQkDim + t].bits ==
                 fp8_656_value_bits(fp8_pool.bytes().data() + tok * 656, t);
      }
      if (!idx_ok || !bf16_ok || !fp8_ok) {
        return internal_error(fmt::format(
            "check_gather: request {} position {} (row {}, token {}): {} gather differs from the "
            "per-token lookup (seed {})",
            b, pos, out, tok, !idx_ok ? "indexer" : (!bf16_ok ? "bf16 latent" : "FP8-656 latent"),
            seed));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
