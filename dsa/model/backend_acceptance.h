// Acceptance of a TARGET_VERIFY forward's drafts where its logits already are (SPEC.md §6.2,
// §6.3): the op table's accept_drafts over the LM head's output buffer, so on the CUDA backend
// the verify logits never leave the device; only the requests' drafts and sampling params go up
// and their accepted counts and emitted tokens come back (a few bytes per request).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/kernels/sampling/sampler.h"
#include "dsa/runtime/buffer.h"

namespace dsa::model {

struct VerifyAcceptance {
  std::vector<int32_t> accepted;  // [B] a
  std::vector<int32_t> emitted;   // [B, d + 1] g_1..g_a, y, then -1
};

// The small backend buffers of the op's inputs and outputs: reserved at the model's capacity when
// it loads, so steps allocate nothing (run grows them only for a larger batch).
class BackendAcceptance {
 public:
  Status reserve(kernels::Backend backend, size_t requests, size_t rows);

  // logits: backend memory, [B (d + 1), row_stride], request b's row j at b (d + 1) + j; vocab:
  // the sampleable ids (<= row_stride). drafts [B, d], params and first_position [B] are host.
  Status run(const kernels::OpTable& ops, const float* logits, int64_t row_stride, int32_t vocab,
             int32_t d, std::span<const int32_t> drafts,
             std::span<const kernels::SamplingParams> params,
             std::span<const int32_t> first_position, VerifyAcceptance* out);

 private:
  size_t requests_ = 0, rows_ = 0;
  runtime::Buffer<int32_t> drafts_, top_k_, first_, accepted_, emitted_;
  runtime::Buffer<float> temperature_, top_p_;
  runtime::Buffer<uint64_t> seed_;
};

}  // namespace dsa::model
