// Entry points of the sparse MLA references: host validation and the index space of each op;
// the math lives in sparse_mla_row.cc.
#include <fmt/format.h>

#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_row.h"

namespace dsa::kernels {

namespace {
using sparse_mla_detail::KeySpace;
using sparse_mla_detail::RowBatch;

constexpr std::string_view kDecode = "sparse_mla_decode";
constexpr std::string_view kPrefill = "sparse_mla_prefill";

RowBatch batch_of(const SparseMlaDecodeParams& p) {
  return RowBatch{kDecode, p.q,        p.indices, p.topk_len, p.rows, p.num_heads,
                  p.topk,  p.sm_scale, p.out,     p.lse,      nullptr};
}
RowBatch batch_of(const SparseMlaPrefillParams& p) {
  return RowBatch{kPrefill, p.q,        p.indices, p.topk_len, p.tokens,   p.num_heads,
                  p.topk,   p.sm_scale, p.out,     p.lse,      p.max_logit};
}

// Decode reads the paged pool: valid slots are [P, num_pages * P), page 0 being reserved.
KeySpace keys_of(const SparseMlaDecodeParams& p, std::string& rule) {
  const int64_t hi = int64_t{p.cache.num_pages} * p.cache.page_size;
  rule = fmt::format("[P, num_pages * P) = [{}, {}) (page 0 is reserved)", p.cache.page_size, hi);
  LatentPool pool = p.cache;
  return KeySpace{p.cache.page_size, hi, rule,
                  [pool](int32_t s, float* row) { load_latent_row(pool, s, row); }};
}

// Prefill reads contiguous bf16 rows; source 1 keeps the pool's slot rules (§3g).
KeySpace keys_of(const SparseMlaPrefillParams& p, std::string& rule) {
  const bool flat = p.kv_source == SparseMlaKvSource::kFlatPool;
  const int64_t lo = flat ? kPageSize : 0;
  rule = flat ? fmt::format("[P, S_kv) = [{}, {}) (page 0 is reserved)", lo, p.num_kv)
              : fmt::format("[0, S_kv) = [0, {})", p.num_kv);
  const bf16* kv = p.kv;
  return KeySpace{lo, p.num_kv, rule, [kv](int32_t i, float* row) {
                    for (int t = 0; t < kQkDim; ++t)
                      row[t] = bf16_to_float(kv[int64_t{i} * kQkDim + t]);
                  }};
}

template <typename Params>
Status run(const Params& p, SparseMlaBounds* bounds) {
  DSA_RETURN_IF_ERROR(validate(p));
  std::string rule;
  const KeySpace keys = keys_of(p, rule);
  const RowBatch b = batch_of(p);
  if (checked_mode()) DSA_RETURN_IF_ERROR(sparse_mla_detail::check_batch_data(b, keys));
  sparse_mla_detail::run_batch(b, keys, bounds);
  return ok_status();
}
}  // namespace

Status validate(const SparseMlaDecodeParams& p) {
  DSA_RETURN_IF_ERROR(sparse_mla_detail::validate_batch(batch_of(p)));
  if (p.cache.format != LatentFormat::kBf16 && p.cache.format != LatentFormat::kFp8_656) {
    return field_error(StatusCode::kInvalidArgument, kDecode, "cache.format",
                       static_cast<int64_t>(p.cache.format), "must be kBf16 or kFp8_656");
  }
  DSA_RETURN_IF_ERROR(require_eq(kDecode, "cache.page_size", p.cache.page_size, kPageSize));
  DSA_RETURN_IF_ERROR(
      require_in(kDecode, "cache.num_pages", p.cache.num_pages, 1, INT32_MAX / kPageSize));
  DSA_RETURN_IF_ERROR(require_in(kDecode, "num_splits", p.num_splits, 0, kMaxSparseMlaSplits));
  DSA_RETURN_IF_ERROR(
      require_in(kDecode, "split_workspace_floats", p.split_workspace_floats, 0, INT64_MAX));
  if (p.num_splits > 1) {
    const int64_t need = sparse_mla_decode_workspace_floats(p.rows, p.num_heads, p.num_splits);
    if (p.split_workspace_floats < need) {
      return field_error(
          StatusCode::kInvalidArgument, kDecode, "split_workspace_floats", p.split_workspace_floats,
          fmt::format("must be >= S * R * H * 514 = {} for num_splits = {}", need, p.num_splits));
    }
    if (p.rows > 0)
      DSA_RETURN_IF_ERROR(require_pointer(kDecode, "split_workspace", p.split_workspace));
  }
  if (p.rows == 0) return ok_status();
  return require_pointer(kDecode, "cache.data", p.cache.data);
}

Status validate(const SparseMlaPrefillParams& p) {
  DSA_RETURN_IF_ERROR(sparse_mla_detail::validate_batch(batch_of(p)));
  switch (p.kv_source) {
    case SparseMlaKvSource::kFlatPool:
      // The flat pool is num_pages * P rows with page 0 reserved, so at least one page.
      if (p.num_kv < kPageSize || p.num_kv % kPageSize != 0) {
        return field_error(StatusCode::kInvalidArgument, kPrefill, "num_kv", p.num_kv,
                           "must be a positive multiple of P = 64 for the flat pool (source 1)");
      }
      break;
    case SparseMlaKvSource::kGathered:
      DSA_RETURN_IF_ERROR(require_in(kPrefill, "num_kv", p.num_kv, 0, INT32_MAX));
      break;
    default:
      return field_error(StatusCode::kInvalidArgument, kPrefill, "kv_source",
                         static_cast<int64_t>(p.kv_source), "must be kFlatPool or kGathered");
  }
  if (p.tokens == 0 || p.num_kv == 0) return ok_status();
  return require_pointer(kPrefill, "kv", p.kv);
}

Status sparse_mla_decode_ref(const SparseMlaDecodeParams& p) { return run(p, nullptr); }
Status sparse_mla_prefill_ref(const SparseMlaPrefillParams& p) { return run(p, nullptr); }

StatusOr<SparseMlaBounds> sparse_mla_decode_bounds(const SparseMlaDecodeParams& p) {
  SparseMlaBounds bounds;
  DSA_RETURN_IF_ERROR(run(p, &bounds));
  return bounds;
}
StatusOr<SparseMlaBounds> sparse_mla_prefill_bounds(const SparseMlaPrefillParams& p) {
  SparseMlaBounds bounds;
  DSA_RETURN_IF_ERROR(run(p, &bounds));
  return bounds;
}

}  // namespace dsa::kernels
