// Sampling for an overlapped decode (SPEC.md §6.7, F = 1): the op table's accept_drafts at d = 0
// over the LM head's output, its tokens left in backend memory, where the next forward gathers
// them as its input tokens (ForwardInputs::token_rows), and copied into a page-locked host slot
// with a marker behind the copy. The host reads a launch's tokens one step later, waiting only for
// that marker, so the GPU is already running the next forward when it does.
//
// Two slots, used in turn: launch k writes slot k % 2 (its packed inputs and its results), and the
// owner collects launch k before launch k + 2 (collect() is what frees a slot), so a slot is never
// rewritten while a copy from or into it may be pending. The device error word is copied with the
// tokens, so an error of the step is seen at its collect without a synchronisation.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/kernels/sampling/sampler.h"
#include "dsa/runtime/backend_memory.h"
#include "dsa/runtime/buffer.h"

namespace dsa::model {

// One launch's results, to collect once.
struct SampleTicket {
  int32_t slot = -1;  // the host slot of the launch (-1: none)
  int32_t count = 0;  // tokens
  // The owner's: its metadata uploads issued before the launch, all read once it is collected.
  uint64_t uploads_before = 0;
};

class OverlappedSampler {
 public:
  OverlappedSampler() = default;
  OverlappedSampler(const OverlappedSampler&) = delete;
  OverlappedSampler& operator=(const OverlappedSampler&) = delete;
  ~OverlappedSampler();

  // At the model's capacity (requests per forward), once at load: steps allocate nothing.
  // error_word: the backend's device error word (nullptr on the CPU, whose ops return errors).
  Status reserve(kernels::Backend backend, size_t requests, const void* error_word);

  // Token b of params.size() = count rows: row b of `logits` (backend, row_stride apart, ids
  // [0, vocab)) sampled with params[b] at positions[b]. InvalidArgument past the capacity, or
  // when the slot this launch takes has not been collected.
  StatusOr<SampleTicket> launch(const kernels::OpTable& ops, const float* logits,
                                int64_t row_stride, int32_t vocab,
                                std::span<const kernels::SamplingParams> params,
                                std::span<const int32_t> positions);
  // The last launch's tokens in backend memory ([last_count()]) until the next launch.
  const int32_t* tokens() const { return tokens_.data(); }
  int32_t last_count() const { return last_count_; }
  // Waits for the ticket's copy (not for later work) and returns its tokens; a device error
  // raised by then comes back as `error_seen` = true (the caller synchronises and decodes it).
  Status collect(const SampleTicket& t, std::vector<int32_t>* out, bool* error_seen);
  // Launches not yet collected (0, 1 or 2).
  int32_t outstanding() const;

 private:
  struct Slot {
    void* host = nullptr;  // page-locked: packed inputs, then tokens, then the error word
    void* marker = nullptr;
    bool pending = false;
  };
  Status launch_rows(const kernels::OpTable& ops, Slot& s, const float* logits, int64_t row_stride,
                     int32_t vocab, std::span<const kernels::SamplingParams> params,
                     std::span<const int32_t> positions);

  const runtime::MemoryOps* mem_ = nullptr;
  size_t requests_ = 0;
  const void* error_word_ = nullptr;
  std::array<Slot, 2> slots_{};
  int32_t next_ = 0;
  runtime::Buffer<uint64_t> in_;  // the launch's packed inputs in backend memory
  runtime::Buffer<int32_t> tokens_, accepted_;
  int32_t last_count_ = 0;
};

}  // namespace dsa::model
