#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/mqa_logit.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "ragged_logits";

// Checked-mode device-data rules (§3d), all verified before anything is written.
Status check_data(const RaggedLogitsParams& p) {
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    const int32_t ks = p.ks[t], ke = p.ke[t];
    if (ks < 0 || ks > p.num_keys) {
      return element_error(StatusCode::kOutOfRange, kOp, "ks", t, ks,
                           fmt::format("must be in [0, S = {}]", p.num_keys));
    }
    if (ke < ks || ke > p.num_keys) {
      return element_error(StatusCode::kOutOfRange, kOp, "ke", t, ke,
                           fmt::format("must be in [ks = {}, S = {}]", ks, p.num_keys));
    }
    if (ke - ks > p.logits_ld) {
      return out_of_range(fmt::format("{}: ke[{}] - ks[{}] = {}: must be <= logits_ld = {}", kOp, t,
                                      t, ke - ks, p.logits_ld));
    }
  }
  return ok_status();
}

// The row's key range as used: in-contract values unchanged, others clamped (unchecked, §3d).
std::pair<int32_t, int32_t> key_range(const RaggedLogitsParams& p, int32_t t) {
  const int32_t ks = std::clamp(p.ks[t], 0, p.num_keys);
  const int64_t hi = std::min<int64_t>(p.num_keys, ks + p.logits_ld);
  const int32_t ke = static_cast<int32_t>(std::clamp<int64_t>(p.ke[t], ks, hi));
  return {ks, ke};
}

// fn(j, decoded key, kscale) for every defined column of row t.
template <class F>
void for_each_key(const RaggedLogitsParams& p, int32_t t, F&& fn) {
  const auto [ks, ke] = key_range(p, t);
  std::vector<double> key(size_t(p.head_dim));
  for (int32_t c = ks; c < ke; ++c) {
    decode_e4m3(p.k8 + int64_t{c} * p.head_dim, p.head_dim, key.data());
    fn(c - ks, key.data(), p.kscale[c]);
  }
}

std::vector<double> decoded_q(const RaggedLogitsParams& p, int32_t t) {
  const int64_t count = int64_t{p.num_heads} * p.head_dim;
  std::vector<double> q(static_cast<size_t>(count));
  decode_e4m3(p.q + t * count, count, q.data());
  return q;
}
}  // namespace

Status validate(const RaggedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_keys", p.num_keys, 0, INT32_MAX));
  if (p.num_heads != 16 && p.num_heads != 32 && p.num_heads != 64) {
    return field_error(StatusCode::kInvalidArgument, kOp, "num_heads", p.num_heads,
                       "must be 16, 32 or 64");
  }
  DSA_RETURN_IF_ERROR(require_eq(kOp, "head_dim", p.head_dim, 128));
  if (p.logits_ld < 0 || p.logits_ld % 4 != 0) {
    return field_error(StatusCode::kInvalidArgument, kOp, "logits_ld", p.logits_ld,
                       "must be >= 0 and a multiple of 4");
  }
  const int64_t bytes = int64_t{p.num_tokens} * p.logits_ld * 4;
  if (bytes > p.workspace_bytes) {
    return resource_exhausted(fmt::format(
        "{}: num_tokens = {} x logits_ld = {} needs {} bytes: exceeds workspace_bytes = {} "
        "(chunk the queries)",
        kOp, p.num_tokens, p.logits_ld, bytes, p.workspace_bytes));
  }
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "q", p.q));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "w", p.w));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "ks", p.ks));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "ke", p.ke));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "logits", p.logits));
  if (p.num_keys == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "k8", p.k8));
  return require_pointer(kOp, "kscale", p.kscale);
}

Status ragged_logits_ref(const RaggedLogitsParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const bool checked = checked_mode();
  if (checked) DSA_RETURN_IF_ERROR(check_data(p));
  parallel_for(p.num_tokens, [&](int64_t t64) {
    const auto t = static_cast<int32_t>(t64);
    const std::vector<double> q = decoded_q(p, t);
    float* out = p.logits + t64 * p.logits_ld;
    for_each_key(p, t, [&](int32_t j, const double* key, float kscale) {
      out[j] = mqa_logit(q.data(), p.w + t64 * p.num_heads, p.num_heads, p.head_dim, key, kscale);
    });
    if (checked) {
      const auto [ks, ke] = key_range(p, t);
      std::fill(out + (ke - ks), out + p.logits_ld, std::numeric_limits<float>::quiet_NaN());
    }
  });
  return ok_status();
}

Status ragged_logits_bounds(const RaggedLogitsParams& p, float* bound) {
  DSA_RETURN_IF_ERROR(validate(p));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "bound", bound));
  parallel_for(p.num_tokens, [&](int64_t t64) {
    const auto t = static_cast<int32_t>(t64);
    const std::vector<double> q = decoded_q(p, t);
    float* out = bound + t64 * p.logits_ld;
    std::fill(out, out + p.logits_ld, 0.f);
    for_each_key(p, t, [&](int32_t j, const double* key, float kscale) {
      out[j] =
          mqa_logit_bound(q.data(), p.w + t64 * p.num_heads, p.num_heads, p.head_dim, key, kscale);
    });
  });
  return ok_status();
}

}  // namespace dsa::kernels
