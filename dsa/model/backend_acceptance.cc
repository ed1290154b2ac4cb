#include "dsa/model/backend_acceptance.h"

#include <fmt/format.h>

#include <algorithm>

namespace dsa::model {

Status BackendAcceptance::reserve(kernels::Backend backend, size_t requests, size_t rows) {
  if (requests <= requests_ && rows <= rows_) return ok_status();
  requests_ = std::max(requests, requests_);
  rows_ = std::max(rows, rows_);
  // At least one element each: the op rejects null pointers even where it reads nothing (d = 0).
  DSA_ASSIGN_OR_RETURN(drafts_, runtime::Buffer<int32_t>::alloc(backend, rows_));
  DSA_ASSIGN_OR_RETURN(emitted_, runtime::Buffer<int32_t>::alloc(backend, rows_));
  DSA_ASSIGN_OR_RETURN(top_k_, runtime::Buffer<int32_t>::alloc(backend, requests_));
  DSA_ASSIGN_OR_RETURN(first_, runtime::Buffer<int32_t>::alloc(backend, requests_));
  DSA_ASSIGN_OR_RETURN(accepted_, runtime::Buffer<int32_t>::alloc(backend, requests_));
  DSA_ASSIGN_OR_RETURN(temperature_, runtime::Buffer<float>::alloc(backend, requests_));
  DSA_ASSIGN_OR_RETURN(top_p_, runtime::Buffer<float>::alloc(backend, requests_));
  DSA_ASSIGN_OR_RETURN(seed_, runtime::Buffer<uint64_t>::alloc(backend, requests_));
  return ok_status();
}

Status BackendAcceptance::run(const kernels::OpTable& ops, const float* logits, int64_t row_stride,
                              int32_t vocab, int32_t d, std::span<const int32_t> drafts,
                              std::span<const kernels::SamplingParams> params,
                              std::span<const int32_t> first_position, VerifyAcceptance* out) {
  const size_t B = params.size(), n = size_t(d) + 1;
  if (first_position.size() != B || drafts.size() != B * size_t(d)) {
    return invalid_argument(fmt::format(
        "backend acceptance: {} requests with {} first positions and {} drafts (d = {})", B,
        first_position.size(), drafts.size(), d));
  }
  out->accepted.assign(B, 0);
  out->emitted.assign(B * n, -1);
  if (B == 0) return ok_status();
  DSA_RETURN_IF_ERROR(reserve(ops.backend, B, B * n));
  std::vector<float> t(B), p(B);
  std::vector<int32_t> k(B);
  std::vector<uint64_t> s(B);
  for (size_t b = 0; b < B; ++b) {
    t[b] = params[b].temperature, p[b] = params[b].top_p, k[b] = params[b].top_k;
    s[b] = params[b].seed;
  }
  DSA_RETURN_IF_ERROR(drafts_.upload(drafts));
  DSA_RETURN_IF_ERROR(temperature_.upload(t));
  DSA_RETURN_IF_ERROR(top_p_.upload(p));
  DSA_RETURN_IF_ERROR(top_k_.upload(k));
  DSA_RETURN_IF_ERROR(seed_.upload(s));
  DSA_RETURN_IF_ERROR(first_.upload(first_position));
  kernels::AcceptanceParams a;
  a.logits = logits;
  a.requests = int32_t(B);
  a.drafts_per_request = d;
  a.vocab = vocab;
  a.row_stride = row_stride;
  a.drafts = drafts_.data();
  a.temperature = temperature_.data();
  a.top_p = top_p_.data();
  a.top_k = top_k_.data();
  a.seed = seed_.data();
  a.first_position = first_.data();
  a.accepted = accepted_.data();
  a.emitted = emitted_.data();
  DSA_RETURN_IF_ERROR(ops.accept_drafts(a));
  DSA_RETURN_IF_ERROR(accepted_.download(out->accepted));
  return emitted_.download(out->emitted);
}

}  // namespace dsa::model
