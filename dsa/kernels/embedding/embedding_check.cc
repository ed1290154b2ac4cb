#include "dsa/kernels/embedding/embedding_check.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

Status check_embedding(EmbeddingFn op, int32_t tokens, int32_t vocab, int32_t dim, uint64_t seed) {
  if (tokens < 1 || vocab < 1 || dim < 1) {
    return invalid_argument(
        fmt::format("check_embedding: tokens = {}, vocab = {}, dim = {}: all must be >= 1", tokens,
                    vocab, dim));
  }
  ScopedCheckedMode checked(true);
  testing::Rng rng(seed);
  std::vector<bf16> table = rng.bf16_vector(size_t(vocab) * dim);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) {
    ids[t] = t == 0 ? 0 : (t == 1 ? vocab - 1 : int32_t(rng.randint(0, vocab - 1)));
  }
  if (tokens > 2) ids[tokens - 1] = ids[2];  // a repeated id
  std::vector<bf16> y(size_t(tokens) * dim, float_to_bf16(NAN));
  DSA_RETURN_IF_ERROR(op({ids.data(), table.data(), y.data(), tokens, vocab, dim}));
  for (int32_t t = 0; t < tokens; ++t) {
    for (int32_t d = 0; d < dim; ++d) {
      const bf16 want = table[size_t(ids[t]) * dim + d], got = y[size_t(t) * dim + d];
      if (want.bits != got.bits) {
        return internal_error(
            fmt::format("embedding: y[{}][{}] = {:#06x}, expected {:#06x} (id {})", t, d, got.bits,
                        want.bits, ids[t]));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
