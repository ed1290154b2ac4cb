#include "dsa/model/backend_acceptance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace dsa::model {

namespace {

// int32 words of the packed inputs after the seeds: four per request, the drafts, then the
// kept drafts' gather index (one per draft).
size_t in_words(size_t requests, size_t drafts) { return 4 * requests + 2 * drafts; }

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

Status BackendAcceptance::reserve(kernels::Backend backend, size_t requests, size_t rows) {
  if (requests <= requests_ && rows <= rows_) return ok_status();
  backend_ = backend;
  // At least one element each: the op rejects null pointers even where it reads nothing (d = 0).
  requests_ = std::max({requests, requests_, size_t(1)});
  rows_ = std::max({rows, rows_, size_t(1)});
  const size_t in64 = requests_ + (in_words(requests_, rows_) + 1) / 2;
  DSA_ASSIGN_OR_RETURN(in_, runtime::Buffer<uint64_t>::alloc(backend, in64));
  in_host_.assign(in64, 0);
  DSA_ASSIGN_OR_RETURN(out_, runtime::Buffer<int32_t>::alloc(backend, requests_ + rows_));
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
                                 std::span<const int32_t> first_position, const SlotDrafts& kept) {
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
  last_b_ = B, last_n_ = n;
  if (B == 0) return ok_status();
  DSA_RETURN_IF_ERROR(reserve(ops.backend, B, B * n));
  // The packed image at this launch's B: seeds, then the 32-bit fields, then the drafts (a
  // layout only this file knows); only its used words are copied.
  int32_t* w = reinterpret_cast<int32_t*>(in_host_.data() + B);
  pack_acceptance_params(params, first_position, in_host_.data(), w);
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
  DSA_RETURN_IF_ERROR(in_.upload(std::span<const uint64_t>(in_host_.data(), used)));
  int32_t* dw = reinterpret_cast<int32_t*>(in_.data() + B);
  if (any_kept) {
    const int64_t e = int64_t(sizeof(int32_t));
    kernels::RowCopyParams g{kept.slots,
                             dw + 4 * B,
                             dw + 4 * B + drafts.size(),
                             e,
                             e,
                             e,
                             int32_t(drafts.size()),
                             int32_t(n - 1) * kept.count,
                             kernels::RowCopyMode::kGather};
    DSA_RETURN_IF_ERROR(ops.row_copy(g));
  }
  // accepted [B] then emitted [B (d + 1)], contiguous: read() is one copy.
  return ops.accept_drafts(packed_acceptance_params(logits, row_stride, vocab, int32_t(B), d,
                                                    in_.data(), dw, dw + 4 * B, out_.data(),
                                                    out_.data() + B));
}

StatusOr<size_t> BackendAcceptance::read(VerifyAcceptance* out) {
  const size_t B = last_b_, n = last_n_;
  out->accepted.assign(B, 0);
  out->emitted.assign(B * n, -1);
  if (B == 0) return size_t{0};
  out_host_.resize(B + B * n);
  DSA_RETURN_IF_ERROR(runtime::memory_ops(backend_).copy(out_host_.data(), out_.data(),
                                                         out_host_.size() * sizeof(int32_t)));
  return out_host_.size() * sizeof(int32_t);
}

// After the caller synchronised: the copy of read() has landed.
void BackendAcceptance::unpack(VerifyAcceptance* out) const {
  const size_t B = last_b_;
  if (B == 0) return;
  std::copy(out_host_.begin(), out_host_.begin() + long(B), out->accepted.begin());
  std::copy(out_host_.begin() + long(B), out_host_.end(), out->emitted.begin());
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
  a.drafts = greedy_zero_.data();  // read nothing at d = 0; the op wants a pointer
  a.temperature = greedy_temperature_.data();
  a.top_p = greedy_top_p_.data();
  a.top_k = greedy_zero_.data();
  a.seed = greedy_seed_.data();
  a.first_position = greedy_zero_.data();
  a.accepted = greedy_accepted_.data();
  a.emitted = tokens;
  return ops.accept_drafts(a);
}

}  // namespace dsa::model
