#include "dsa/model/overlapped_sampler.h"

#include <fmt/format.h>

#include <cstring>

#include "dsa/model/backend_acceptance.h"

namespace dsa::model {

namespace {

// A slot's host block, in bytes from its start: the packed inputs (seeds [R] u64, then
// temperature, top_p, top_k and position [R] 32-bit each), the tokens [R] and the error word.
constexpr size_t kErrorWordBytes = 16;  // cuda::DeviceErrorWord: four int32
size_t inputs_bytes(size_t r) { return r * (sizeof(uint64_t) + 4 * sizeof(int32_t)); }
size_t slot_bytes(size_t r) { return inputs_bytes(r) + r * sizeof(int32_t) + kErrorWordBytes; }

}  // namespace

OverlappedSampler::~OverlappedSampler() {
  if (mem_ == nullptr) return;
  // A copy into a slot may still be in flight when the model goes away after a failed step.
  (void)mem_->sync();
  for (Slot& s : slots_) {
    if (s.host != nullptr) mem_->release_staging(s.host);
    if (s.marker != nullptr) mem_->destroy_marker(s.marker);
  }
}

Status OverlappedSampler::reserve(kernels::Backend backend, size_t requests,
                                  const void* error_word) {
  if (mem_ != nullptr) return failed_precondition("overlapped sampler: reserved twice");
  mem_ = &runtime::memory_ops(backend);
  requests_ = std::max<size_t>(requests, 1);
  error_word_ = error_word;
  for (Slot& s : slots_) {
    DSA_ASSIGN_OR_RETURN(s.host, mem_->alloc_staging(slot_bytes(requests_)));
    DSA_ASSIGN_OR_RETURN(s.marker, mem_->create_marker());
  }
  DSA_ASSIGN_OR_RETURN(in_, runtime::Buffer<uint64_t>::alloc(backend, 3 * requests_));
  DSA_ASSIGN_OR_RETURN(tokens_, runtime::Buffer<int32_t>::alloc(backend, requests_));
  DSA_ASSIGN_OR_RETURN(accepted_, runtime::Buffer<int32_t>::alloc(backend, requests_));
  return ok_status();
}

StatusOr<SampleTicket> OverlappedSampler::launch(const kernels::OpTable& ops, const float* logits,
                                                 int64_t row_stride, int32_t vocab,
                                                 std::span<const kernels::SamplingParams> params,
                                                 std::span<const int32_t> positions) {
  if (mem_ == nullptr) return failed_precondition("overlapped sampler: not reserved");
  const size_t B = params.size();
  if (B > requests_ || positions.size() != B) {
    return invalid_argument(
        fmt::format("overlapped sampling: {} rows with {} positions (capacity {} rows)", B,
                    positions.size(), requests_));
  }
  last_count_ = int32_t(B);
  Slot& s = slots_[size_t(next_)];
  if (s.pending) {
    return failed_precondition(fmt::format(
        "overlapped sampling: slot {} still holds a launch that was never collected", next_));
  }
  // No rows (an idle DP rank's padded forward): only the marker, so the owner's collect still
  // tells it which uploads have been read.
  if (B > 0) DSA_RETURN_IF_ERROR(launch_rows(ops, s, logits, row_stride, vocab, params, positions));
  DSA_RETURN_IF_ERROR(mem_->record_marker(s.marker));
  s.pending = true;
  const SampleTicket t{next_, int32_t(B)};
  next_ = 1 - next_;
  return t;
}

Status OverlappedSampler::launch_rows(const kernels::OpTable& ops, Slot& s, const float* logits,
                                      int64_t row_stride, int32_t vocab,
                                      std::span<const kernels::SamplingParams> params,
                                      std::span<const int32_t> positions) {
  const size_t B = params.size();
  auto* host = static_cast<uint8_t*>(s.host);
  if (all_greedy(params)) {
    // Every row greedy: the op's argmax kernel reads none of the packed params, so neither their
    // packing nor their copy runs (one kernel fewer between two decodes).
    DSA_RETURN_IF_ERROR(validate_greedy_call(params, positions));
    DSA_RETURN_IF_ERROR(ops.accept_drafts(all_greedy_params(logits, row_stride, vocab, int32_t(B),
                                                            accepted_.data(), tokens_.data())));
  } else {
    // Packed at this launch's B (so the op's arrays are contiguous), as the capacity layout's
    // prefix.
    pack_acceptance_params(params, positions, reinterpret_cast<uint64_t*>(host),
                           reinterpret_cast<int32_t*>(host + B * sizeof(uint64_t)));
    DSA_RETURN_IF_ERROR(mem_->copy(in_.data(), host, inputs_bytes(B)));
    const int32_t* dw = reinterpret_cast<const int32_t*>(in_.data() + B);
    // d = 0: no drafts are read (`accepted_` stands in for them).
    DSA_RETURN_IF_ERROR(ops.accept_drafts(
        packed_acceptance_params(logits, row_stride, vocab, int32_t(B), 0, in_.data(), dw,
                                 accepted_.data(), accepted_.data(), tokens_.data())));
  }
  uint8_t* results = host + inputs_bytes(requests_);
  DSA_RETURN_IF_ERROR(mem_->copy(results, tokens_.data(), B * sizeof(int32_t)));
  uint8_t* error = results + requests_ * sizeof(int32_t);
  if (error_word_ != nullptr) {
    DSA_RETURN_IF_ERROR(mem_->copy(error, error_word_, kErrorWordBytes));
  } else {
    std::memset(error, 0, kErrorWordBytes);
  }
  return ok_status();
}

Status OverlappedSampler::collect(const SampleTicket& t, std::vector<int32_t>* out,
                                  bool* error_seen) {
  *error_seen = false;
  out->clear();
  if (t.slot < 0 || t.slot > 1 || !slots_[size_t(t.slot)].pending) {
    return failed_precondition(
        fmt::format("overlapped sampling: slot {} has no launch to collect", t.slot));
  }
  Slot& s = slots_[size_t(t.slot)];
  DSA_RETURN_IF_ERROR(mem_->wait_marker(s.marker));
  s.pending = false;
  if (t.count == 0) return ok_status();
  const uint8_t* results = static_cast<const uint8_t*>(s.host) + inputs_bytes(requests_);
  out->resize(size_t(t.count));
  std::memcpy(out->data(), results, out->size() * sizeof(int32_t));
  int32_t code = 0;
  std::memcpy(&code, results + requests_ * sizeof(int32_t), sizeof(code));
  *error_seen = code != 0;
  return ok_status();
}

int32_t OverlappedSampler::outstanding() const {
  return int32_t(slots_[0].pending) + int32_t(slots_[1].pending);
}

}  // namespace dsa::model
