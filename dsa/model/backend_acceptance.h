// Acceptance of a TARGET_VERIFY forward's drafts where its logits already are (SPEC.md §6.2,
// §6.3): the op table's accept_drafts over the LM head's output buffer, so on the CUDA backend
// the verify logits never leave the device; only the requests' drafts and sampling params go up
// and their accepted counts and emitted tokens come back (a few bytes per request) — one copy
// each way, the inputs and the outputs each packed into one backend block.
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

// Drafts kept in backend memory where the draft chain left them (slot-major [slots, count]:
// draft s + 1 of row r at s * count + r): request b's drafts are row rows[b] there, or, for -1
// (and with no rows at all), the host's.
struct SlotDrafts {
  const int32_t* slots = nullptr;
  int32_t count = 0;
  std::span<const int32_t> rows;
};

// The op's per-request params packed in backend memory the way this file and the overlapped
// sampler stage them: B seeds (u64), then B temperatures, B top_p, B top_k and B first positions
// (32-bit each) at `words`. The rest of the params as given.
// Writes that packing on the host: params.size() seeds at `seeds`, the four 32-bit arrays at
// `words` (positions: each request's first position).
void pack_acceptance_params(std::span<const kernels::SamplingParams> params,
                            std::span<const int32_t> positions, uint64_t* seeds, int32_t* words);
kernels::AcceptanceParams packed_acceptance_params(const float* logits, int64_t row_stride,
                                                   int32_t vocab, int32_t requests, int32_t d,
                                                   const uint64_t* seeds, const int32_t* words,
                                                   const int32_t* drafts, int32_t* accepted,
                                                   int32_t* emitted);

// The small backend buffers of the op's inputs and outputs: reserved at the model's capacity when
// it loads, so steps allocate nothing (run grows them only for a larger batch).
class BackendAcceptance {
 public:
  Status reserve(kernels::Backend backend, size_t requests, size_t rows);

  // logits: backend memory, [B (d + 1), row_stride], request b's row j at b (d + 1) + j; vocab:
  // the sampleable ids (<= row_stride). drafts [B, d], params and first_position [B] are host;
  // kept: the requests whose drafts are in backend memory instead (their `drafts` entries are
  // ignored). Launches the op; read() brings its results back.
  Status launch(const kernels::OpTable& ops, const float* logits, int64_t row_stride, int32_t vocab,
                int32_t d, std::span<const int32_t> drafts,
                std::span<const kernels::SamplingParams> params,
                std::span<const int32_t> first_position, const SlotDrafts& kept = {});
  // The last launch's results: read() issues one device-to-host copy and returns its bytes; the
  // caller synchronises the backend's stream, then unpack() fills `out` (sized by read()).
  StatusOr<size_t> read(VerifyAcceptance* out);
  void unpack(VerifyAcceptance* out) const;
  // The last launch's outputs where the op wrote them (backend memory): accepted [B], emitted
  // [B, d + 1]; they stay until the next launch.
  int32_t last_requests() const { return int32_t(last_b_); }
  const int32_t* accepted() const { return out_.data(); }
  const int32_t* emitted() const { return out_.data() + last_b_; }
  // Greedy tokens (temperature 0: the argmax over ids [0, vocab), -1 for a row without an eligible
  // one) of rows [0, count) of `logits` into tokens (backend memory, [count]). Only launched:
  // nothing goes up (the greedy params live on the backend from reserve()) and nothing comes back.
  Status launch_greedy(const kernels::OpTable& ops, const float* logits, int64_t row_stride,
                       int32_t vocab, int32_t count, int32_t* tokens);

 private:
  kernels::Backend backend_ = kernels::Backend::kCpu;
  size_t requests_ = 0, rows_ = 0;
  // Inputs, packed at each launch's B (launch()); the host image is reused (no allocation).
  runtime::Buffer<uint64_t> in_;
  std::vector<uint64_t> in_host_;
  // Outputs: accepted [B] | emitted [B (d + 1)], read by one copy into out_host_.
  runtime::Buffer<int32_t> out_;
  std::vector<int32_t> out_host_;
  size_t last_b_ = 0, last_n_ = 0;  // the last launch's B and d + 1
  // launch_greedy's params at capacity: temperature 0, top_k 0, seed 0, position 0 (zero-filled
  // allocations), top_p 1 (uploaded once), and its accepted counts (unread).
  runtime::Buffer<float> greedy_temperature_, greedy_top_p_;
  runtime::Buffer<int32_t> greedy_zero_, greedy_accepted_;
  runtime::Buffer<uint64_t> greedy_seed_;
};

}  // namespace dsa::model
