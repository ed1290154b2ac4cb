#include <cstring>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/embedding/embedding.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "embedding";

bool id_in_vocab(const EmbeddingParams& p, int32_t id) { return id >= 0 && id < p.vocab_size; }
}  // namespace

Status validate(const EmbeddingParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "vocab_size", p.vocab_size, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "dim", p.dim, 1, INT32_MAX));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "ids", p.ids));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "table", p.table));
  return require_pointer(kOp, "y", p.y);
}

Status embedding_ref(const EmbeddingParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (checked_mode()) {
    for (int32_t t = 0; t < p.num_tokens; ++t) {
      if (!id_in_vocab(p, p.ids[t])) {
        return element_error(StatusCode::kOutOfRange, kOp, "ids", t, p.ids[t],
                             fmt::format("must be in [0, vocab_size = {})", p.vocab_size));
      }
    }
  }
  const size_t row_bytes = size_t(p.dim) * sizeof(bf16);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    bf16* y = p.y + t * p.dim;
    const int32_t id = p.ids[t];
    if (id_in_vocab(p, id)) {
      std::memcpy(y, p.table + int64_t{id} * p.dim, row_bytes);
    } else {
      std::memset(y, 0, row_bytes);  // unchecked: neutralised to a zero row
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
