#include "dsa/kernels/sparse_mla/sparse_mla_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_dense_check.h"
#include "dsa/testing/pools.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
// One request's tokens in a randomly paged pool, and the dense problem built beside it.
struct Context {
  std::vector<int32_t> slot_of;  // [L] position -> global slot
  std::vector<float> dense_kv;   // [L + extra, 576]: positions 0..L-1, then per-row subsets
  std::vector<int32_t> begin, end;
  std::vector<int32_t> indices;   // [R, K] positions (callers map them to slots), -1 padded
  std::vector<int32_t> topk_len;  // [R]
};

Context make_context(testing::LatentPoolBuffer& pool, int32_t len, testing::Rng& rng) {
  Context c;
  std::vector<int32_t> pages = rng.permutation(1, pool.pool().num_pages);
  for (int32_t p = 0; p < len; ++p) {
    c.slot_of.push_back(pages[p / kPageSize] * kPageSize + p % kPageSize);
    std::vector<float> row = pool.row(c.slot_of.back());
    c.dense_kv.insert(c.dense_kv.end(), row.begin(), row.end());
  }
  return c;
}

// Row of visible length row_len: every position when row_len <= K (dense range [0, row_len),
// a causal mask), else a random K-subset appended to the dense rows. The list is shuffled.
void add_row(Context& c, int32_t row_len, int32_t topk, testing::Rng& rng) {
  std::vector<int32_t> chosen = rng.permutation(0, row_len);
  if (row_len <= topk) {
    c.begin.push_back(0);
    c.end.push_back(row_len);
  } else {
    chosen.resize(topk);
    std::vector<int32_t> sorted = chosen;
    std::sort(sorted.begin(), sorted.end());
    c.begin.push_back(static_cast<int32_t>(c.dense_kv.size() / kQkDim));
    for (int32_t p : sorted) {
      c.dense_kv.insert(c.dense_kv.end(), c.dense_kv.begin() + int64_t{p} * kQkDim,
                        c.dense_kv.begin() + int64_t{p + 1} * kQkDim);
    }
    c.end.push_back(static_cast<int32_t>(c.dense_kv.size() / kQkDim));
  }
  c.topk_len.push_back(static_cast<int32_t>(chosen.size()));
  chosen.resize(topk, -1);
  c.indices.insert(c.indices.end(), chosen.begin(), chosen.end());
}

std::vector<int32_t> to_slots(const Context& c) {
  std::vector<int32_t> s = c.indices;
  for (auto& i : s) i = i < 0 ? -1 : c.slot_of[i];
  return s;
}

// Rejects bad shapes before any buffer is sized from them; H, K and scale go through the op's
// own validation (with no rows, so no pointers are needed).
Status check_shape(int32_t rows, int32_t heads, int32_t topk, int32_t len) {
  if (rows < 0 || len < 0) {
    return invalid_argument(
        fmt::format("sparse MLA check: rows = {}, context = {}: must be >= 0", rows, len));
  }
  SparseMlaDecodeParams p;
  p.num_heads = heads, p.topk = topk, p.sm_scale = kV32SmScale, p.cache.num_pages = 1;
  return validate(p);
}
}  // namespace

Status check_sparse_mla_decode(SparseMlaDecodeFn op, int32_t rows, int32_t heads, int32_t topk,
                               int32_t context_len, LatentFormat format, uint64_t seed) {
  DSA_RETURN_IF_ERROR(check_shape(rows, heads, topk, context_len));
  testing::Rng rng(seed);
  testing::LatentPoolBuffer pool(2 + (context_len + kPageSize - 1) / kPageSize, format);
  pool.fill_random(rng);
  Context c = make_context(pool, context_len, rng);
  for (int32_t r = 0; r < rows; ++r)
    add_row(c, std::max(context_len - (rows - 1 - r), 0), topk, rng);
  std::vector<int32_t> slots = to_slots(c);
  std::vector<bf16> q = rng.bf16_vector(size_t(rows) * heads * kQkDim, 0.5f);
  std::vector<bf16> out(size_t(rows) * heads * kVDim);
  std::vector<float> lse(size_t(rows) * heads);

  SparseMlaDecodeParams p;
  p.q = q.data(), p.cache = pool.pool(), p.indices = slots.data(), p.topk_len = c.topk_len.data();
  p.rows = rows, p.num_heads = heads, p.topk = topk, p.sm_scale = kV32SmScale;
  p.out = out.data(), p.lse = lse.data();
  DSA_RETURN_IF_ERROR(op(p));
  DenseMlaResult dense =
      dense_mla_attention(q.data(), rows, heads, c.dense_kv, c.begin, c.end, kV32SmScale);
  return compare_with_dense(dense, out.data(), lse.data(), nullptr);
}

Status check_sparse_mla_prefill(SparseMlaPrefillFn op, int32_t tokens, int32_t heads, int32_t topk,
                                uint64_t seed) {
  DSA_RETURN_IF_ERROR(check_shape(tokens, heads, topk, 0));
  testing::Rng rng(seed);
  const int32_t cached = static_cast<int32_t>(rng.randint(0, std::max(0, topk - tokens)));
  const int32_t kv_len = cached + tokens;
  testing::LatentPoolBuffer pool(2 + (kv_len + kPageSize - 1) / kPageSize, LatentFormat::kBf16);
  pool.fill_random(rng);
  Context c = make_context(pool, kv_len, rng);
  for (int32_t t = 0; t < tokens; ++t) add_row(c, cached + t + 1, topk, rng);
  std::vector<int32_t> slots = to_slots(c);
  // Source 2's buffer: the request's rows in position order, as §3h gathers them.
  std::vector<bf16> gathered(size_t(kv_len) * kQkDim);
  for (int32_t pos = 0; pos < kv_len; ++pos) {
    std::memcpy(gathered.data() + size_t(pos) * kQkDim,
                pool.bytes().data() + size_t(c.slot_of[pos]) * kBf16LatentBytes, kBf16LatentBytes);
  }
  const size_t n_rh = size_t(tokens) * heads;
  std::vector<bf16> q = rng.bf16_vector(n_rh * kQkDim, 0.5f);
  std::vector<bf16> out1(n_rh * kVDim), out2(n_rh * kVDim);
  std::vector<float> lse1(n_rh), lse2(n_rh), max1(n_rh), max2(n_rh);

  SparseMlaPrefillParams p;
  p.q = q.data(), p.topk_len = c.topk_len.data(), p.tokens = tokens, p.num_heads = heads;
  p.topk = topk, p.sm_scale = kV32SmScale;
  p.kv = reinterpret_cast<const bf16*>(pool.bytes().data());
  p.num_kv = pool.pool().num_pages * kPageSize, p.kv_source = SparseMlaKvSource::kFlatPool;
  p.indices = slots.data(), p.out = out1.data(), p.lse = lse1.data(), p.max_logit = max1.data();
  DSA_RETURN_IF_ERROR(op(p));
  p.kv = gathered.data(), p.num_kv = kv_len, p.kv_source = SparseMlaKvSource::kGathered;
  p.indices = c.indices.data(), p.out = out2.data(), p.lse = lse2.data(), p.max_logit = max2.data();
  DSA_RETURN_IF_ERROR(op(p));
  if (std::memcmp(out1.data(), out2.data(), out1.size() * sizeof(bf16)) != 0 ||
      std::memcmp(lse1.data(), lse2.data(), lse1.size() * 4) != 0 ||
      std::memcmp(max1.data(), max2.data(), max1.size() * 4) != 0) {
    return internal_error(
        "sparse_mla_prefill: source 1 (flat pool) and source 2 (gathered) differ");
  }
  DenseMlaResult dense =
      dense_mla_attention(q.data(), tokens, heads, c.dense_kv, c.begin, c.end, kV32SmScale);
  return compare_with_dense(dense, out1.data(), lse1.data(), max1.data());
}

}  // namespace dsa::kernels
