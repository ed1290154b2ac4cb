// Sparse MLA attention (SPEC.md §3f decode on the paged latent pool, §3g prefill on bf16 rows).
// Each query row r attends, for every head h, to the latent rows named by its index list:
//   z_i = sm_scale * q[r,h,:] . kv_i        lse = ln sum_i exp(z_i)
//   out[r,h,:] = sum_i exp(z_i - lse) * kv_i[0:512]
// over A_r = { i < topk_len[r] (or K) : indices[r,i] valid }. An empty A_r gives out = 0,
// lse = +inf. Class T; the CPU reference accumulates in double and rounds once.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

// V3.2's softmax scale: 192^-1/2 * (0.1 ln 40 + 1)^2 (YaRN mscale), given by the caller.
inline constexpr float kV32SmScale = 0.1352338f;

struct SparseMlaDecodeParams {
  const bf16* q = nullptr;            // [R, H, 576] bf16: [absorbed q_nope (512) | q_pe (64)]
  LatentPool cache;                   // one layer's latent pool, bf16 (§2.3) or FP8-656 (§2.4)
  const int32_t* indices = nullptr;   // [R, K] int32 global slots, -1 = invalid
  const int32_t* topk_len = nullptr;  // [R] int32 in [0, K], or nullptr (= K for every row)
  int32_t rows = 0;                   // R
  int32_t num_heads = 0;              // H in {16, 32, 64, 128}
  int32_t topk = 0;                   // K: multiple of 64 in [64, 2048]
  float sm_scale = 0.f;               // finite, > 0
  bf16* out = nullptr;                // [R, H, 512] bf16
  float* lse = nullptr;               // [R, H] fp32, natural log; +inf for empty rows

  // Split-KV (CUDA path only; the reference ignores these). Each row's key list is cut into
  // num_splits fixed ranges of 64-key tiles whose partial softmax states go to the workspace and
  // are merged in split order, so results are deterministic for a given num_splits.
  //   0: the launcher chooses (splits only when R * ceil(H / 64) < SMs and the workspace holds
  //      the partials; never splits without a workspace); 1: never split; 2..64: exactly that.
  int32_t num_splits = 0;
  float* split_workspace = nullptr;    // device fp32 [S, R, H, 512 + 2] (partial o, then m, l)
  int64_t split_workspace_floats = 0;  // capacity of split_workspace, in floats
};

inline constexpr int32_t kMaxSparseMlaSplits = 64;

// Floats of split_workspace that num_splits splits of R rows and H heads need.
inline int64_t sparse_mla_decode_workspace_floats(int32_t rows, int32_t heads, int32_t num_splits) {
  return int64_t{num_splits} * rows * heads * (kVDim + 2);
}

// Where the kv rows of prefill come from (§3g). Both are [S_kv, 576] bf16 contiguous rows.
enum class SparseMlaKvSource {
  kFlatPool,  // source 1: the bf16 pool viewed flat; indices are global slots, so page 0
              // ([0, P)) is reserved and S_kv = num_pages * P must be a multiple of P
  kGathered,  // source 2: rows gathered by §3h; indices are rows in [0, S_kv)
};

struct SparseMlaPrefillParams {
  const bf16* q = nullptr;   // [T, H, 576] bf16
  const bf16* kv = nullptr;  // [S_kv, 576] bf16, contiguous rows
  int32_t num_kv = 0;        // S_kv
  SparseMlaKvSource kv_source = SparseMlaKvSource::kGathered;
  const int32_t* indices = nullptr;   // [T, K] int32 rows of kv, -1 = invalid
  const int32_t* topk_len = nullptr;  // [T] int32 in [0, K], or nullptr (= K for every row)
  int32_t tokens = 0;                 // T
  int32_t num_heads = 0;              // H in {16, 32, 64, 128}
  int32_t topk = 0;                   // K: multiple of 64 in [64, 2048]
  float sm_scale = 0.f;               // finite, > 0
  bf16* out = nullptr;                // [T, H, 512] bf16
  float* lse = nullptr;               // [T, H] fp32, natural log; +inf for empty rows
  float* max_logit = nullptr;         // [T, H] fp32 or nullptr: max_{i in A_r} z_i, -inf if empty
};

// Host checks (InvalidArgument): R or T >= 0, H, K, sm_scale, pointers, pool geometry
// (P = 64, num_pages >= 1, known format) or S_kv (>= 0; source 1: a positive multiple of P).
Status validate(const SparseMlaDecodeParams& p);
Status validate(const SparseMlaPrefillParams& p);

// CPU references. Checked mode: topk_len outside [0, K], or an index among the first topk_len
// entries that is neither -1 nor a valid row (decode and source 1: [P, num_pages * P), page 0
// included in the rejection; source 2: [0, S_kv)) is OutOfRange, and nothing is written.
// Unchecked: such indices count as -1 and topk_len is clamped into [0, K].
Status sparse_mla_decode_ref(const SparseMlaDecodeParams& p);
Status sparse_mla_prefill_ref(const SparseMlaPrefillParams& p);

// Per-element tolerance of §3f for a GPU result, next to the reference it applies to.
//   out: 2^-7 |ref| + 2^-8 V_r + eps_z V_r      lse: 1e-4 max(1, |ref|) + eps_z
// with V_r = max |kv_i[c]| (i in A_r, c < 512), eps_z = 2^-16 sm_scale max_i sum_t |q_t kv_i[t]|
// (per head). Rows with an empty A_r get bound 0 (they must match exactly).
struct SparseMlaBounds {
  std::vector<float> out;  // [R, H, 512]
  std::vector<float> lse;  // [R, H]
};

// Runs the reference on p (writing p.out, p.lse and, for prefill, p.max_logit exactly as the
// _ref functions do) and returns the bounds for each element of those outputs.
StatusOr<SparseMlaBounds> sparse_mla_decode_bounds(const SparseMlaDecodeParams& p);
StatusOr<SparseMlaBounds> sparse_mla_prefill_bounds(const SparseMlaPrefillParams& p);

// CUDA implementations (sparse_mla_cuda.cu, CUDA builds only): every pointer of p is device
// memory, 16-byte aligned; launched on cuda::current_stream(). Same host validation as the
// references; in checked mode the device checks of the references report OutOfRange through the
// device error word (the call synchronises), in unchecked mode bad values are neutralised.
Status sparse_mla_decode_cuda(const SparseMlaDecodeParams& p);
Status sparse_mla_prefill_cuda(const SparseMlaPrefillParams& p);

}  // namespace dsa::kernels
