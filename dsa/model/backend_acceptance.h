// Acceptance of a TARGET_VERIFY forward's drafts where its logits already are (SPEC.md §6.2,
// §6.3): the op table's accept_drafts over the LM head's output buffer, so on the CUDA backend
// the verify logits never leave the device; only the requests' drafts and sampling params go up
// and their accepted counts and emitted tokens come back (a few bytes per request) — one copy
// each way, the inputs and the outputs each packed into one backend block.
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

// Whether every request samples greedily (temperature 0): the op's `greedy` form then runs; a
// d = 0 call needs none of the packed params (all_greedy_params), so the caller packs and copies
// nothing up.
bool all_greedy(std::span<const kernels::SamplingParams> params);
// The reference's checks of each request's params and first position (acceptance.h:
// InvalidArgument naming the request), on the host: the greedy form reads neither, so without
// this a bad value would pass unnoticed. The engine validates params at admission already.
Status validate_greedy_call(std::span<const kernels::SamplingParams> params,
                            std::span<const int32_t> positions);
// The op's params for such a call: `greedy`, no sampling params, one row per request.
kernels::AcceptanceParams all_greedy_params(const float* logits, int64_t row_stride, int32_t vocab,
                                            int32_t requests, int32_t* accepted, int32_t* emitted);

// One launch's results, to collect once (BackendAcceptance::readback / collect).
struct AcceptTicket {
  int32_t slot = -1;  // the launch's slot (-1: none)
  int32_t requests = 0, n = 0;
  // The owner's: its metadata uploads issued before the launch, all read once it is collected.
  uint64_t uploads_before = 0;
};

// The small backend buffers of the op's inputs and outputs: reserved at the model's capacity when
// it loads, so steps allocate nothing (run grows them only for a larger batch).
//
// Two slots, used in turn: launch k writes slot k % 2 (its packed inputs, staged in page-locked
// memory, and its outputs), so while step k + 1 runs, the forwards of that step can still read
// step k's counts (the overlapped speculative step: SPEC.md §6.7 with F = 1, step_commit.h's
// shift). A launch's results come back either at once (read(): one copy, the caller synchronises)
// or later (readback() at launch time: a copy into the slot's page-locked results behind a
// marker; collect() waits for that marker only). Every launch is read or collected before the
// launch after the next one reuses its slot.
class BackendAcceptance {
 public:
  BackendAcceptance() = default;
  BackendAcceptance(const BackendAcceptance&) = delete;
  BackendAcceptance& operator=(const BackendAcceptance&) = delete;
  ~BackendAcceptance();

  // error_word: the backend's device error word (nullptr on the CPU), copied with the results of
  // readback() so collect() sees an error of the step without a synchronisation.
  Status reserve(kernels::Backend backend, size_t requests, size_t rows,
                 const void* error_word = nullptr);

  // logits: backend memory, [B (d + 1), row_stride], request b's row j at b (d + 1) + j; vocab:
  // the sampleable ids (<= row_stride). drafts [B, d], params and first_position [B] are host;
  // kept: the requests whose drafts are in backend memory instead (their `drafts` entries are
  // ignored). shifted: the previous launch (same B requests, same order) is a step not yet read
  // whose counts the first positions do not include: the op adds them (its shift_accepted), as
  // it reads the kept drafts from their slots (its draft_index): one op launch, nothing before
  // it but the inputs' copy. With every request greedy the op runs its `greedy` form (the argmax
  // kernel, which reads no params, positions or shift: validate_greedy_call checks the first two
  // here); at d = 0 nothing is copied up then. read() or readback() brings its results back.
  Status launch(const kernels::OpTable& ops, const float* logits, int64_t row_stride, int32_t vocab,
                int32_t d, std::span<const int32_t> drafts,
                std::span<const kernels::SamplingParams> params,
                std::span<const int32_t> first_position, const SlotDrafts& kept = {},
                bool shifted = false);
  // The last launch's results: read() issues one device-to-host copy and returns its bytes; the
  // caller synchronises the backend's stream, then unpack() fills `out` (sized by read()).
  StatusOr<size_t> read(VerifyAcceptance* out);
  void unpack(VerifyAcceptance* out) const;
  // The last launch's results copied into its slot's page-locked block behind a marker (with the
  // error word), nothing waited for; collect() waits for that marker only and fills `out`.
  StatusOr<AcceptTicket> readback();
  Status collect(const AcceptTicket& t, VerifyAcceptance* out, bool* error_seen);
  // The last launch's outputs where the op wrote them (backend memory): accepted [B], emitted
  // [B, d + 1]; they stay until the launch after the next. previous_*: the launch before it.
  int32_t last_requests() const { return int32_t(slots_[last()].b); }
  int32_t last_drafts() const { return int32_t(slots_[last()].n) - 1; }  // d (-1: none launched)
  const int32_t* accepted() const { return slots_[last()].out.data(); }
  const int32_t* emitted() const { return accepted() + slots_[last()].b; }
  int32_t previous_requests() const { return int32_t(slots_[1 - last()].b); }
  const int32_t* previous_accepted() const { return slots_[1 - last()].out.data(); }
  const int32_t* previous_emitted() const { return previous_accepted() + slots_[1 - last()].b; }
  // Greedy tokens (temperature 0: the argmax over ids [0, vocab), -1 for a row without an eligible
  // one) of rows [0, count) of `logits` into tokens (backend memory, [count]). Only launched, on
  // the op's argmax kernel (`greedy`): nothing goes up and nothing comes back. The greedy params
  // resident from reserve() are read only under DSA_ACCEPT_GREEDY=generic.
  Status launch_greedy(const kernels::OpTable& ops, const float* logits, int64_t row_stride,
                       int32_t vocab, int32_t count, int32_t* tokens);

 private:
  struct Slot {
    runtime::Buffer<uint64_t> in;  // packed inputs (backend)
    runtime::Buffer<int32_t> out;  // accepted [B] | emitted [B (d + 1)] (backend)
    void* host = nullptr;          // page-locked: the packed inputs, then the results + error word
    void* marker = nullptr;
    size_t b = 0, n = 0;  // the launch's B and d + 1
    bool unread = false;  // launched, neither read nor collected
  };
  size_t last() const { return size_t(1 - next_); }
  size_t inputs_bytes() const;
  const runtime::MemoryOps* mem_ = nullptr;
  kernels::Backend backend_ = kernels::Backend::kCpu;
  size_t requests_ = 0, rows_ = 0;
  const void* error_word_ = nullptr;
  std::array<Slot, 2> slots_{};
  int32_t next_ = 0;
  std::vector<int32_t> out_host_;  // read()'s destination
  // launch_greedy's params at capacity: temperature 0, top_k 0, seed 0, position 0 (zero-filled
  // allocations), top_p 1 (uploaded once), and its accepted counts (unread).
  runtime::Buffer<float> greedy_temperature_, greedy_top_p_;
  runtime::Buffer<int32_t> greedy_zero_, greedy_accepted_;
  runtime::Buffer<uint64_t> greedy_seed_;
};

}  // namespace dsa::model
