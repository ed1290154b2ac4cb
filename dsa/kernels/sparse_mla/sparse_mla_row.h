// The per-row math of sparse MLA (SPEC.md §3f), written once for decode and both prefill
// sources: they differ only in how an index names a kv row (KeySpace).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"

namespace dsa::kernels::sparse_mla_detail {

// Which indices name a kv row, and how to read one row as 576 exact floats.
struct KeySpace {
  int64_t lo = 0;  // valid indices are [lo, hi)
  int64_t hi = 0;
  std::string_view rule;  // the rule quoted in OutOfRange messages
  std::function<void(int32_t index, float* row576)> load;
  bool valid(int32_t i) const { return i >= lo && i < hi; }
};

// The fields decode and prefill share.
struct RowBatch {
  std::string_view op;
  const bf16* q = nullptr;            // [R, H, 576]
  const int32_t* indices = nullptr;   // [R, K]
  const int32_t* topk_len = nullptr;  // [R] or nullptr
  int32_t rows = 0, heads = 0, topk = 0;
  float sm_scale = 0.f;
  bf16* out = nullptr;         // [R, H, 512]
  float* lse = nullptr;        // [R, H]
  float* max_logit = nullptr;  // [R, H] or nullptr
};

// Host checks shared by both ops (InvalidArgument).
Status validate_batch(const RowBatch& b);

// Checked-mode data checks (OutOfRange), run over every row before anything is written.
Status check_batch_data(const RowBatch& b, const KeySpace& keys);

// Computes every row (in parallel over rows; each row alone, in a fixed order). Out-of-contract
// values are neutralised as in unchecked mode. When bounds is non-null it is resized and filled
// with the §3f tolerance of each output element.
void run_batch(const RowBatch& b, const KeySpace& keys, SparseMlaBounds* bounds);

// double -> bf16 with one round-to-nearest-even (no double rounding through fp32).
bf16 double_to_bf16(double x);

}  // namespace dsa::kernels::sparse_mla_detail
