#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kGroupOp = "moe_group";
constexpr std::string_view kLinearOp = "grouped_linear";

// ---- moe_group ----

// The expert of slot s, or -1 (not dispatched, or an out-of-contract id in unchecked mode).
int32_t expert_of(const MoeGroupParams& p, int64_t s) {
  const int32_t e = p.expert_ids[s];
  return e >= 0 && e < p.num_experts ? e : -1;
}

Status check_ids(const MoeGroupParams& p) {
  for (int64_t s = 0; s < p.num_slots; ++s) {
    const int32_t e = p.expert_ids[s];
    if (e < -1 || e >= p.num_experts) {
      return element_error(StatusCode::kOutOfRange, kGroupOp, "expert_ids", s, e,
                           fmt::format("must be in [-1, num_experts = {})", p.num_experts));
    }
  }
  return ok_status();
}

// ---- grouped_linear ----

// The pair's x (or y) row, or -1 when it is out of [0, rows).
int32_t row_of(const int32_t* index, int64_t i, int32_t rows) {
  const int64_t r = index != nullptr ? index[i] : i;
  return r >= 0 && r < rows ? static_cast<int32_t>(r) : -1;
}

// eff[g] = min(capacity, max(0, offsets[0..g])): the offsets clamped into [0, capacity] and made
// non-decreasing, so the pairs never exceed capacity (the CUDA grid relies on it). Equal to the
// offsets whenever they pass check_data.
std::vector<int32_t> effective_offsets(const GroupedLinearParams& p) {
  std::vector<int32_t> eff(static_cast<size_t>(p.num_groups) + 1);
  int32_t running = 0;
  for (int32_t g = 0; g <= p.num_groups; ++g) {
    running = std::max(running, p.offsets[g]);
    eff[g] = std::min(running, p.capacity);
  }
  return eff;
}

Status check_offsets(const GroupedLinearParams& p) {
  if (p.offsets[0] != 0) {
    return element_error(StatusCode::kOutOfRange, kLinearOp, "offsets", 0, p.offsets[0],
                         "must be 0");
  }
  for (int32_t g = 1; g <= p.num_groups; ++g) {
    if (p.offsets[g] < p.offsets[g - 1]) {
      return element_error(
          StatusCode::kOutOfRange, kLinearOp, "offsets", g, p.offsets[g],
          fmt::format("must be >= offsets[{}] = {} (non-decreasing)", g - 1, p.offsets[g - 1]));
    }
  }
  if (p.offsets[p.num_groups] > p.capacity) {
    return element_error(StatusCode::kOutOfRange, kLinearOp, "offsets", p.num_groups,
                         p.offsets[p.num_groups],
                         fmt::format("must be <= capacity = {}", p.capacity));
  }
  return ok_status();
}

bool is_fp8(const GroupedLinearParams& p) { return p.weights_fp8 != nullptr; }

// Group g's weight (either form) and, for FP8, its scales: null when the group must be skipped.
const void* group_weight(const GroupedLinearParams& p, int32_t g) {
  if (!is_fp8(p)) return p.weights[g];
  return p.weight_scales[g] != nullptr ? p.weights_fp8[g] : nullptr;
}

int64_t blocks_of(int32_t n) { return (int64_t{n} + kLinearBlock - 1) / kLinearBlock; }

// FP8 only: the activation quantiser's contract (§2.1, finite x) on the rows a pair reads, and
// finite block scales of the groups with pairs; the message names the array and position.
Status check_fp8_values(const GroupedLinearParams& p, int32_t g) {
  for (int64_t i = p.offsets[g]; i < p.offsets[g + 1]; ++i) {
    const int64_t xr = p.x_row != nullptr ? p.x_row[i] : i;
    const bf16* row = p.x + xr * p.in_features;
    for (int32_t j = 0; j < p.in_features; ++j) {
      const float v = bf16_to_float(row[j]);
      if (!std::isfinite(v)) {
        return out_of_range(
            fmt::format("{}: x[{}][{}] = {} (pair {}): must be finite (FP8 "
                        "activation quantisation, §2.1)",
                        kLinearOp, xr, j, v, i));
      }
    }
  }
  const int64_t n = blocks_of(p.out_features) * blocks_of(p.in_features);
  for (int64_t b = 0; b < n; ++b) {
    const float v = p.weight_scales[g][b];
    if (!std::isfinite(v)) {
      return out_of_range(
          fmt::format("{}: weight_scales[{}][{}] = {}: must be finite", kLinearOp, g, b, v));
    }
  }
  return ok_status();
}

// Offsets first (the pairs checked next are [0, offsets[G])), then every pair's rows and weight.
Status check_data(const GroupedLinearParams& p) {
  DSA_RETURN_IF_ERROR(check_offsets(p));
  for (int32_t g = 0; g < p.num_groups; ++g) {
    for (int64_t i = p.offsets[g]; i < p.offsets[g + 1]; ++i) {
      const int64_t xr = p.x_row != nullptr ? p.x_row[i] : i;
      if (xr < 0 || xr >= p.x_rows) {
        return element_error(StatusCode::kOutOfRange, kLinearOp, "x_row", i, xr,
                             fmt::format("must be in [0, x_rows = {})", p.x_rows));
      }
      const int64_t yr = p.y_row != nullptr ? p.y_row[i] : i;
      if (yr < 0 || yr >= p.y_rows) {
        return element_error(StatusCode::kOutOfRange, kLinearOp, "y_row", i, yr,
                             fmt::format("must be in [0, y_rows = {})", p.y_rows));
      }
    }
    if (p.offsets[g + 1] == p.offsets[g]) continue;  // no pairs: the weight is not read
    const int32_t pairs = p.offsets[g + 1] - p.offsets[g];
    if (!is_fp8(p) && p.weights[g] == nullptr) {
      return out_of_range(
          fmt::format("{}: weights[{}] is null: group {} has {} pairs", kLinearOp, g, g, pairs));
    }
    if (is_fp8(p)) {
      const bool no_w = p.weights_fp8[g] == nullptr;
      if (no_w || p.weight_scales[g] == nullptr) {
        return out_of_range(fmt::format("{}: {}[{}] is null: group {} has {} pairs", kLinearOp,
                                        no_w ? "weights_fp8" : "weight_scales", g, g, pairs));
      }
      DSA_RETURN_IF_ERROR(check_fp8_values(p, g));
    }
  }
  return ok_status();
}

// One group: its valid pairs' x rows gathered, one linear_ref call, the rows scattered to y. The
// gather keeps every output row bit-identical to linear_ref on that row alone (each of its
// outputs is computed independently of the other rows).
Status run_group(const GroupedLinearParams& p, int32_t g, int32_t lo, int32_t hi) {
  const size_t in = size_t(p.in_features), out = size_t(p.out_features);
  std::vector<int32_t> dst;
  std::vector<bf16> xs;
  for (int64_t i = lo; i < hi; ++i) {
    const int32_t xr = row_of(p.x_row, i, p.x_rows), yr = row_of(p.y_row, i, p.y_rows);
    if (xr < 0 || yr < 0) continue;  // unchecked mode: neutralised
    dst.push_back(yr);
    xs.insert(xs.end(), p.x + size_t(xr) * in, p.x + size_t(xr) * in + in);
  }
  if (dst.empty() || group_weight(p, g) == nullptr) return ok_status();
  std::vector<bf16> ys(dst.size() * out);
  LinearParams lp;
  lp.x = xs.data();
  if (is_fp8(p)) {
    lp.weight_fp8 = p.weights_fp8[g];
    lp.weight_scale_inv = p.weight_scales[g];
  } else {
    lp.weight = p.weights[g];
  }
  lp.y = ys.data();
  lp.num_tokens = static_cast<int32_t>(dst.size());
  lp.in_features = p.in_features;
  lp.out_features = p.out_features;
  DSA_RETURN_IF_ERROR(linear_ref(lp));
  for (size_t r = 0; r < dst.size(); ++r)
    std::memcpy(p.y + size_t(dst[r]) * out, &ys[r * out], out * sizeof(bf16));
  return ok_status();
}
}  // namespace

Status validate(const MoeGroupParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kGroupOp, "num_slots", p.num_slots, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kGroupOp, "num_experts", p.num_experts, 1, INT32_MAX - 1));
  DSA_RETURN_IF_ERROR(require_in(kGroupOp, "k", p.k, 1, INT32_MAX));
  if (p.num_slots % p.k != 0) {
    return field_error(StatusCode::kInvalidArgument, kGroupOp, "num_slots", p.num_slots,
                       fmt::format("must be a multiple of k = {} (rows * k)", p.k));
  }
  DSA_RETURN_IF_ERROR(require_pointer(kGroupOp, "offsets", p.offsets));
  if (p.num_slots == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kGroupOp, "expert_ids", p.expert_ids));
  DSA_RETURN_IF_ERROR(require_pointer(kGroupOp, "pair_row", p.pair_row));
  return require_pointer(kGroupOp, "pair_slot", p.pair_slot);
}

// A counting sort: counts, exclusive scan, then placement in ascending slot order (stable).
Status moe_group_ref(const MoeGroupParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (checked_mode()) DSA_RETURN_IF_ERROR(check_ids(p));
  const int32_t E = p.num_experts;
  std::vector<int32_t> cursor(static_cast<size_t>(E), 0);
  for (int64_t s = 0; s < p.num_slots; ++s) {
    const int32_t e = expert_of(p, s);
    if (e >= 0) ++cursor[e];
  }
  p.offsets[0] = 0;
  for (int32_t e = 0; e < E; ++e) {
    p.offsets[e + 1] = p.offsets[e] + cursor[e];
    cursor[e] = p.offsets[e];
  }
  for (int64_t s = 0; s < p.num_slots; ++s) {
    const int32_t e = expert_of(p, s);
    if (e < 0) continue;
    const int32_t i = cursor[e]++;
    p.pair_row[i] = static_cast<int32_t>(s / p.k);
    p.pair_slot[i] = static_cast<int32_t>(s);
  }
  for (int64_t i = p.offsets[E]; i < p.num_slots; ++i) p.pair_row[i] = p.pair_slot[i] = -1;
  return ok_status();
}

Status validate(const GroupedLinearParams& p) {
  if ((p.weights == nullptr) == (p.weights_fp8 == nullptr)) {
    return invalid_argument(fmt::format("{}: weights and weights_fp8 are both {}: set exactly one",
                                        kLinearOp, p.weights == nullptr ? "null" : "set"));
  }
  if (p.weights_fp8 != nullptr) {
    DSA_RETURN_IF_ERROR(require_pointer(kLinearOp, "weight_scales", p.weight_scales));
  } else if (p.weight_scales != nullptr) {
    return invalid_argument(fmt::format(
        "{}: weight_scales is set with bf16 weights: only FP8 weights have scales", kLinearOp));
  }
  DSA_RETURN_IF_ERROR(require_pointer(kLinearOp, "offsets", p.offsets));
  DSA_RETURN_IF_ERROR(require_in(kLinearOp, "num_groups", p.num_groups, 1, INT32_MAX - 1));
  DSA_RETURN_IF_ERROR(require_in(kLinearOp, "capacity", p.capacity, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kLinearOp, "max_group_pairs", p.max_group_pairs, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kLinearOp, "in_features", p.in_features, 1, INT32_MAX));
  const int32_t multiple = is_fp8(p) ? 16 : 8;
  if (p.in_features % multiple != 0) {
    return field_error(StatusCode::kInvalidArgument, kLinearOp, "in_features", p.in_features,
                       fmt::format("must be a multiple of {} ({} weights: 16-byte row loads)",
                                   multiple, is_fp8(p) ? "FP8" : "bf16"));
  }
  DSA_RETURN_IF_ERROR(require_in(kLinearOp, "out_features", p.out_features, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kLinearOp, "x_rows", p.x_rows, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kLinearOp, "y_rows", p.y_rows, 0, INT32_MAX));
  if (p.x_rows > 0) DSA_RETURN_IF_ERROR(require_pointer(kLinearOp, "x", p.x));
  if (p.y_rows > 0) DSA_RETURN_IF_ERROR(require_pointer(kLinearOp, "y", p.y));
  const int second =
      (p.weights_fp8_b != nullptr) + (p.weight_scales_b != nullptr) + (p.y_b != nullptr);
  if (second != 0 && second != 3) {
    return invalid_argument(fmt::format(
        "{}: weights_fp8_b, weight_scales_b and y_b: {} of 3 set; the second projection needs all",
        kLinearOp, second));
  }
  if (second == 3 && p.weights_fp8 == nullptr) {
    return invalid_argument(
        fmt::format("{}: weights_fp8_b is set with bf16 weights: the second projection is FP8 only",
                    kLinearOp));
  }
  return ok_status();
}

GroupedLinearParams second_projection(const GroupedLinearParams& p) {
  GroupedLinearParams b = p;
  b.weights_fp8 = p.weights_fp8_b;
  b.weight_scales = p.weight_scales_b;
  b.y = p.y_b;
  b.weights_fp8_b = nullptr;
  b.weight_scales_b = nullptr;
  b.y_b = nullptr;
  return b;
}

size_t grouped_linear_scratch_bytes(const GroupedLinearParams& p) {
  if (!is_fp8(p) || p.x_rows <= 0 || p.in_features <= 0) return 0;
  const auto align = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t rows = size_t(p.x_rows);
  return align(rows * size_t(p.in_features)) +
         align(rows * size_t(blocks_of(p.in_features)) * sizeof(float));
}

Status grouped_linear_ref(const GroupedLinearParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.y_b != nullptr) {  // the definition: two calls
    GroupedLinearParams a = p;
    a.weights_fp8_b = nullptr;
    a.weight_scales_b = nullptr;
    a.y_b = nullptr;
    DSA_RETURN_IF_ERROR(grouped_linear_ref(a));
    return grouped_linear_ref(second_projection(p));
  }
  if (checked_mode()) DSA_RETURN_IF_ERROR(check_data(p));
  const std::vector<int32_t> eff = effective_offsets(p);
  // Groups run one after another; linear_ref spreads each over the thread pool.
  for (int32_t g = 0; g < p.num_groups; ++g) {
    if (eff[g + 1] > eff[g]) DSA_RETURN_IF_ERROR(run_group(p, g, eff[g], eff[g + 1]));
  }
  return ok_status();
}

}  // namespace dsa::kernels
