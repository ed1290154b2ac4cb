#include "dsa/model/backend_acceptance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace dsa::model {

namespace {

// int32 words of the packed inputs after the seeds: four per request, the drafts, then where each
// kept draft is in the slots (the op's draft_index, one per draft).
size_t in_words(size_t requests, size_t drafts) { return 4 * requests + 2 * drafts; }
constexpr size_t kErrorWordBytes = 16;  // cuda::DeviceErrorWord: four int32

}  // namespace

void pack_acceptance_params(std::span<const kernels::SamplingParams> params,
                            std::span<const int32_t> positions, uint64_t* seeds, int32_t* words) {
  const size_t B = params.size();
  float* temperature = reinterpret_cast<float*>(words);
  float* top_p = reinterpret_cast<float*>(words + B);
  for (size_t b = 0; b < B; ++b) {
    seeds[b] = params[b].seed;
    temperature[b] = params[b].temperature;
    top_p[b] = params[b].top_p;
    words[2 * B + b] = params[b].top_k;
    words[3 * B + b] = positions[b];
  }
}

bool all_greedy(std::span<const kernels::SamplingParams> params) {
  return std::all_of(params.begin(), params.end(),
                     [](const kernels::SamplingParams& sp) { return sp.temperature == 0.f; });
}

Status validate_greedy_call(std::span<const kernels::SamplingParams> params,
                            std::span<const int32_t> positions) {
  for (size_t b = 0; b < params.size(); ++b) {
    if (Status st = kernels::validate(params[b]); !st.ok()) {
      return invalid_argument(fmt::format("acceptance: request {}: {}", b, st.message()));
    }
    if (b < positions.size() && positions[b] < 0) {
      return invalid_argument(fmt::format(
          "acceptance: request {}: first_position = {}: must be >= 0", b, positions[b]));
    }
  }
  return ok_status();
}

kernels::AcceptanceParams all_greedy_params(const float* logits, int64_t row_stride, int32_t vocab,
                                            int32_t requests, int32_t* accepted, int32_t* emitted) {
  kernels::AcceptanceParams a;
  a.logits = logits;
  a.requests = requests;
  a.vocab = vocab;
  a.row_stride = row_stride;
  a.greedy = true;
  a.accepted = accepted;
  a.emitted = emitted;
  return a;
}

kernels::AcceptanceParams packed_acceptance_params(const float* logits, int64_t row_stride,
                                                   int32_t vocab, int32_t requests, int32_t d,
                                                   const uint64_t* seeds, const int32_t* words,
                                                   const int32_t* drafts, int32_t* accepted,
                                                   int32_t* emitted) {
  const size_t B = size_t(requests);
  kernels::AcceptanceParams a;
  a.logits = logits;
  a.requests = requests;
  a.drafts_per_request = d;
  a.vocab = vocab;
  a.row_stride = row_stride;
  a.drafts = drafts;
  a.temperature = reinterpret_cast<const float*>(words);
  a.top_p = reinterpret_cast<const float*>(words + B);
  a.top_k = words + 2 * B;
  a.seed = seeds;
  a.first_position = words + 3 * B;
  a.accepted = accepted;
  a.emitted = emitted;
  return a;
}

BackendAcceptance::~BackendAcceptance() {
  if (mem_ == nullptr) return;
  // A copy into a slot may still be in flight when the model goes away after a failed step.
  (void)mem_->sync();
  for (Slot& s : slots_) {
    if (s.host != nullptr) mem_->release_staging(s.host);
    if (s.marker != nullptr) mem_->destroy_marker(s.marker);
  }
}

// A slot's page-locked block, in bytes: the packed inputs at capacity (seeds [R] u64, then four
// 32-bit words per request and two per draft row), then the results (accepted [R] and emitted
// [rows]) and the error word.
size_t BackendAcceptance::inputs_bytes() const {
  return requests_ * sizeof(uint64_t) + in_words(requests_, rows_) * sizeof(int32_t);
}

Status BackendAcceptance::reserve(kernels::Backend backend, size_t requests, size_t rows,
                                  const void* error_word) {
  if (error_word != nullptr) error_word_ = error_word;
  if (mem_ != nullptr && requests <= requests_ && rows <= rows_) return ok_status();
  for (const Slot& s : slots_) {
    if (s.unread) {
      return failed_precondition("backend acceptance: grown while a launch is unread");
    }
  }
  if (mem_ != nullptr) {
    DSA_RETURN_IF_ERROR(mem_->sync());
    for (Slot& s : slots_) {
      if (s.host != nullptr) mem_->release_staging(s.host);
      s.host = nullptr;
    }
  }
  backend_ = backend;
  mem_ = &runtime::memory_ops(backend);
  // At least one element each, so no pointer the op is given is null.
  requests_ = std::max({requests, requests_, size_t(1)});
  rows_ = std::max({rows, rows_, size_t(1)});
  const size_t in64 = requests_ + (in_words(requests_, rows_) + 1) / 2;
  for (Slot& s : slots_) {
    DSA_ASSIGN_OR_RETURN(s.in, runtime::Buffer<uint64_t>::alloc(backend, in64));
    DSA_ASSIGN_OR_RETURN(s.out, runtime::Buffer<int32_t>::alloc(backend, requests_ + rows_));
    const size_t bytes =
        in64 * sizeof(uint64_t) + (requests_ + rows_) * sizeof(int32_t) + kErrorWordBytes;
    DSA_ASSIGN_OR_RETURN(s.host, mem_->alloc_staging(bytes));
    if (s.marker == nullptr) {
      DSA_ASSIGN_OR_RETURN(s.marker, mem_->create_marker());
    }
  }
  DSA_ASSIGN_OR_RETURN(greedy_temperature_, runtime::Buffer<float>::alloc(backend, rows_));
  DSA_ASSIGN_OR_RETURN(greedy_top_p_, runtime::Buffer<float>::alloc(backend, rows_));
  DSA_ASSIGN_OR_RETURN(greedy_zero_, runtime::Buffer<int32_t>::alloc(backend, rows_));
  DSA_ASSIGN_OR_RETURN(greedy_accepted_, runtime::Buffer<int32_t>::alloc(backend, rows_));
  DSA_ASSIGN_OR_RETURN(greedy_seed_, runtime::Buffer<uint64_t>::alloc(backend, rows_));
  const std::vector<float> ones(rows_, 1.f);
  // Stream-ordered before any launch; `ones` may go once the call returns (backend_memory.h).
  return greedy_top_p_.upload(ones);
}

Status BackendAcceptance::launch(const kernels::OpTable& ops, const float* logits,
                                 int64_t row_stride, int32_t vocab, int32_t d,
                                 std::span<const int32_t> drafts,
                                 std::span<const kernels::SamplingParams> params,
                                 std::span<const int32_t> first_position, const SlotDrafts& kept,
                                 bool shifted) {
  const size_t B = params.size(), n = size_t(std::max(d, 0)) + 1;
  if (!kept.rows.empty() && (kept.rows.size() != B || kept.slots == nullptr)) {
    return invalid_argument(
        fmt::format("backend acceptance: {} kept draft rows for {} requests", kept.rows.size(), B));
  }
  if (first_position.size() != B || drafts.size() != B * size_t(std::max(d, 0))) {
    return invalid_argument(fmt::format(
        "backend acceptance: {} requests with {} first positions and {} drafts (d = {})", B,
        first_position.size(), drafts.size(), d));
  }
  DSA_RETURN_IF_ERROR(reserve(ops.backend, B, B * n));
  const Slot& prev = slots_[last()];
  if (shifted && (d < 1 || prev.b != B || prev.n != n)) {
    return invalid_argument(fmt::format(
        "backend acceptance: shifted by the previous launch ({} requests, n = {}), but this one "
        "has {} requests, n = {}",
        prev.b, prev.n, B, n));
  }
  // Every request greedy: the op's argmax kernel (`greedy`) reads neither the params nor the
  // positions, so they are checked here. At d = 0 (plain decoding) it reads none of the packed
  // inputs, so neither their packing nor their copy runs (one kernel fewer between two decodes).
  const bool greedy = all_greedy(params);
  if (greedy) DSA_RETURN_IF_ERROR(validate_greedy_call(params, first_position));
  Slot& s = slots_[size_t(next_)];
  if (s.unread) {
    return failed_precondition(
        fmt::format("backend acceptance: slot {} still holds a launch that was never read", next_));
  }
  s.b = B, s.n = n;
  next_ = 1 - next_;  // this launch is the last one from here on
  if (B == 0) return ok_status();
  s.unread = true;
  if (greedy && d == 0) {
    return ops.accept_drafts(
        all_greedy_params(logits, row_stride, vocab, int32_t(B), s.out.data(), s.out.data() + B));
  }
  // The packed image at this launch's B: seeds, then the 32-bit fields, then the drafts (a
  // layout only this file knows); only its used words are copied, from page-locked memory. A
  // greedy verify needs only the drafts and their index, but its params are packed as well, so
  // DSA_ACCEPT_GREEDY=generic can run it on the sampling kernel (acceptance_cuda.cu).
  uint64_t* host = static_cast<uint64_t*>(s.host);
  int32_t* w = reinterpret_cast<int32_t*>(host + B);
  pack_acceptance_params(params, first_position, host, w);
  std::memcpy(w + 4 * B, drafts.data(), drafts.size() * sizeof(int32_t));
  // Where each kept draft is: entry j of request b is draft j + 1, slot j's row kept.rows[b].
  int32_t* index = w + 4 * B + drafts.size();
  bool any_kept = false;
  for (size_t b = 0; b < B; ++b) {
    for (size_t j = 0; j + 1 < n; ++j) {
      const int32_t row = kept.rows.empty() ? -1 : kept.rows[b];
      index[b * (n - 1) + j] = row < 0 ? -1 : int32_t(j) * kept.count + row;
      any_kept = any_kept || row >= 0;
    }
  }
  const size_t used = B + (in_words(B, drafts.size()) + 1) / 2;
  DSA_RETURN_IF_ERROR(mem_->copy(s.in.data(), host, used * sizeof(uint64_t)));
  int32_t* dw = reinterpret_cast<int32_t*>(s.in.data() + B);
  kernels::AcceptanceParams a =
      packed_acceptance_params(logits, row_stride, vocab, int32_t(B), d, s.in.data(), dw,
                               dw + 4 * B, s.out.data(), s.out.data() + B);
  // The op reads the kept drafts from their slots and adds the previous step's counts (still on
  // the backend) to the first positions itself: no gather or position commit launches first.
  if (any_kept) {
    a.draft_slots = kept.slots;
    a.draft_index = dw + 4 * B + drafts.size();
    a.draft_index_bound = int32_t(n - 1) * kept.count;
  }
  // The greedy form ignores it: a greedy row's token does not depend on its position.
  if (shifted) a.shift_accepted = prev.out.data();
  // Every request greedy (d >= 1): the argmax kernel instead of the sampler, the same outputs.
  a.greedy = greedy;
  // accepted [B] then emitted [B (d + 1)], contiguous: read() is one copy.
  return ops.accept_drafts(a);
}

StatusOr<size_t> BackendAcceptance::read(VerifyAcceptance* out) {
  Slot& s = slots_[last()];
  const size_t B = s.b, n = s.n;
  out->accepted.assign(B, 0);
  out->emitted.assign(B * n, -1);
  if (B == 0) return size_t{0};
  out_host_.resize(B + B * n);
  DSA_RETURN_IF_ERROR(
      mem_->copy(out_host_.data(), s.out.data(), out_host_.size() * sizeof(int32_t)));
  s.unread = false;  // the caller synchronises before the slot is launched into again
  return out_host_.size() * sizeof(int32_t);
}

// After the caller synchronised: the copy of read() has landed.
void BackendAcceptance::unpack(VerifyAcceptance* out) const {
  const size_t B = slots_[last()].b;
  if (B == 0) return;
  std::copy(out_host_.begin(), out_host_.begin() + long(B), out->accepted.begin());
  std::copy(out_host_.begin() + long(B), out_host_.end(), out->emitted.begin());
}

StatusOr<AcceptTicket> BackendAcceptance::readback() {
  const size_t i = last();
  Slot& s = slots_[i];
  AcceptTicket t{int32_t(i), int32_t(s.b), int32_t(s.n)};
  if (mem_ == nullptr) return failed_precondition("backend acceptance: nothing launched");
  uint8_t* results = static_cast<uint8_t*>(s.host) + inputs_bytes();
  const size_t words = s.b + s.b * s.n;
  if (words > 0) DSA_RETURN_IF_ERROR(mem_->copy(results, s.out.data(), words * sizeof(int32_t)));
  uint8_t* error = results + (requests_ + rows_) * sizeof(int32_t);
  if (error_word_ != nullptr) {
    DSA_RETURN_IF_ERROR(mem_->copy(error, error_word_, kErrorWordBytes));
  } else {
    std::memset(error, 0, kErrorWordBytes);
  }
  DSA_RETURN_IF_ERROR(mem_->record_marker(s.marker));
  s.unread = true;
  return t;
}

Status BackendAcceptance::collect(const AcceptTicket& t, VerifyAcceptance* out, bool* error_seen) {
  *error_seen = false;
  if (t.slot < 0 || t.slot > 1 || !slots_[size_t(t.slot)].unread ||
      slots_[size_t(t.slot)].b != size_t(t.requests)) {
    return failed_precondition(
        fmt::format("backend acceptance: slot {} has no launch to collect", t.slot));
  }
  Slot& s = slots_[size_t(t.slot)];
  DSA_RETURN_IF_ERROR(mem_->wait_marker(s.marker));
  s.unread = false;
  const size_t B = size_t(t.requests), n = size_t(t.n);
  out->accepted.assign(B, 0);
  out->emitted.assign(B * n, -1);
  const auto* results =
      reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(s.host) + inputs_bytes());
  std::copy(results, results + B, out->accepted.begin());
  std::copy(results + B, results + B + B * n, out->emitted.begin());
  int32_t code = 0;
  std::memcpy(&code, results + requests_ + rows_, sizeof(code));
  *error_seen = code != 0;
  return ok_status();
}

Status BackendAcceptance::launch_greedy(const kernels::OpTable& ops, const float* logits,
                                        int64_t row_stride, int32_t vocab, int32_t count,
                                        int32_t* tokens) {
  if (count < 0 || size_t(count) > rows_) {
    return invalid_argument(
        fmt::format("backend greedy drafts: count = {}: must be in [0, {}]", count, rows_));
  }
  if (count == 0) return ok_status();
  kernels::AcceptanceParams a;
  a.logits = logits;
  a.requests = count;
  a.drafts_per_request = 0;
  a.vocab = vocab;
  a.row_stride = row_stride;
  a.temperature = greedy_temperature_.data();
  a.top_p = greedy_top_p_.data();
  a.top_k = greedy_zero_.data();
  a.seed = greedy_seed_.data();
  a.first_position = greedy_zero_.data();
  a.greedy = true;  // the argmax kernel, which reads none of the params above
  a.accepted = greedy_accepted_.data();
  a.emitted = tokens;
  return ops.accept_drafts(a);
}

}  // namespace dsa::model
