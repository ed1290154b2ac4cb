// MoE dispatch on the GPU without host synchronisation (SPEC.md §8.6, §5): every launch here has
// a configuration fixed by the params alone, reads counts and offsets only on the device, and
// neither allocates nor synchronises (checked mode aside, which reads the device error word).
//
// moe_group: one CTA of 512 threads. Counts by shared-memory atomics (integer, so the totals do
//   not depend on the order), an exclusive scan by one warp, then placement in chunks of 512
//   slots: a slot's position is its expert's cursor + the count of the same expert in the
//   chunk's earlier warps + its rank among the warp's peers (__match_any_sync). That is exactly
//   ascending slot order, so the output equals the reference's counting sort bit for bit.
// grouped_linear: grouped_linear_kernel.cuh (bf16 tensor cores) or, for FP8 weights,
//   grouped_linear_fp8_cuda.cu (wgmma e4m3). Checked mode validates the device arrays first with
//   one small pass per array, so the error names the array.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/moe_dispatch/grouped_linear_fp8_cuda.h"
#include "dsa/kernels/moe_dispatch/grouped_linear_kernel.cuh"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"

namespace dsa::kernels {

namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

// ---------------------------------------------------------------------------------------------
// moe_group
// ---------------------------------------------------------------------------------------------

constexpr int kGroupThreads = 512;
constexpr int kGroupWarps = kGroupThreads / 32;
// Shared memory: cursor[E] + warp_count[16][E] int32, 34 KiB at E = 512 (under the 48 KiB default).
constexpr int32_t kMaxExperts = kMoeGroupMaxExpertsCuda;

size_t group_smem_bytes(int32_t experts) {
  return sizeof(int32_t) * size_t(experts) * (1 + kGroupWarps);
}

// Inclusive sum over the warp's lanes.
__device__ int32_t warp_inclusive_sum(int32_t v, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t t = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

// One CTA groups all S slots: expert_ids[S] -> offsets[E + 1], pair_row[S], pair_slot[S].
// Checked mode (err != null): the lowest slot with an id outside [-1, E) is reported (index s,
// value id); every such id is treated as -1 either way.
__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(MoeGroupParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  extern __shared__ int32_t smem[];
  __shared__ int32_t first_bad, total;
  const int32_t E = p.num_experts, S = p.num_slots;
  int32_t* cursor = smem;          // [E]: counts, then each expert's next free pair
  int32_t* warp_count = smem + E;  // [16][E]: the current chunk's count per (warp, expert)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int32_t e = tid; e < E * (1 + kGroupWarps); e += kGroupThreads) smem[e] = 0;
  if (tid == 0) first_bad = INT32_MAX;
  __syncthreads();

  // ---- counts ----
  for (int64_t s = tid; s < S; s += kGroupThreads) {
    const int32_t e = p.expert_ids[s];
    if (e >= 0 && e < E) {
      atomicAdd(&cursor[e], 1);
    } else if (e != -1 && err != nullptr) {
      atomicMin(&first_bad, static_cast<int32_t>(s));
    }
  }
  __syncthreads();
  if (tid == 0 && first_bad != INT32_MAX) {
    cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp, first_bad,
                              p.expert_ids[first_bad]);
  }

  // ---- exclusive scan (warp 0): offsets, and the cursors start at them ----
  if (warp == 0) {
    int32_t carry = 0;
    for (int32_t e0 = 0; e0 < E; e0 += 32) {
      const int32_t e = e0 + lane, c = e < E ? cursor[e] : 0;
      const int32_t incl = warp_inclusive_sum(c, lane);
      if (e < E) p.offsets[e] = cursor[e] = carry + incl - c;
      carry += __shfl_sync(kFull, incl, 31);
    }
    if (lane == 0) p.offsets[E] = total = carry;
  }
  __syncthreads();

  // ---- placement, 512 slots at a time, in ascending slot order ----
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t base = 0; base < S; base += kGroupThreads) {
    const int64_t s = base + tid;
    int32_t e = s < S ? p.expert_ids[s] : -1;
    if (e >= E) e = -1;
    const unsigned peers = __match_any_sync(kFull, e);
    if (e >= 0 && lane == __ffs(peers) - 1) warp_count[warp * E + e] = __popc(peers);
    __syncthreads();
    if (e >= 0) {
      int32_t pos = cursor[e] + __popc(peers & lanes_below);
      for (int w = 0; w < warp; ++w) pos += warp_count[w * E + e];
      p.pair_row[pos] = static_cast<int32_t>(s / p.k);
      p.pair_slot[pos] = static_cast<int32_t>(s);
    }
    __syncthreads();
    for (int32_t x = tid; x < E; x += kGroupThreads) {  // advance the cursors, clear the chunk
      int32_t sum = 0;
      for (int w = 0; w < kGroupWarps; ++w) {
        sum += warp_count[w * E + x];
        warp_count[w * E + x] = 0;
      }
      cursor[x] += sum;
    }
    __syncthreads();
  }

  // ---- the pairs past the dispatched ones: -1, so stale values never survive ----
  for (int64_t i = int64_t{total} + tid; i < S; i += kGroupThreads)
    p.pair_row[i] = p.pair_slot[i] = -1;
}

// ---------------------------------------------------------------------------------------------
// grouped_linear: checked-mode passes (one CTA each, the lowest bad index reported)
// ---------------------------------------------------------------------------------------------

enum class GlCheck : int { kOffsets, kXRow, kYRow, kWeights };
constexpr int kCheckThreads = 256;

// The rule of `check` at index i: true when broken; *value = the offending value.
__device__ bool gl_broken(const GroupedLinearParams& p, GlCheck check, int32_t i, int32_t* value) {
  switch (check) {
    case GlCheck::kOffsets: {
      const int32_t v = p.offsets[i];
      *value = v;
      return (i == 0 ? v != 0 : v < p.offsets[i - 1]) || (i == p.num_groups && v > p.capacity);
    }
    case GlCheck::kXRow:
    case GlCheck::kYRow: {
      const bool x = check == GlCheck::kXRow;
      const int32_t* index = x ? p.x_row : p.y_row;
      const int32_t r = index != nullptr ? index[i] : i;
      *value = r;
      return r < 0 || r >= (x ? p.x_rows : p.y_rows);
    }
    case GlCheck::kWeights: {
      if (p.offsets[i + 1] <= p.offsets[i]) return false;  // no pairs: the weight is not read
      const bool fp8 = p.weights_fp8 != nullptr;
      const uintptr_t w = fp8 ? reinterpret_cast<uintptr_t>(p.weights_fp8[i])
                              : reinterpret_cast<uintptr_t>(p.weights[i]);
      if (fp8 && p.weight_scales[i] == nullptr) {
        *value = -2;
        return true;
      }
      *value = w == 0 ? -1 : static_cast<int32_t>(w % 16);
      return w == 0 || w % 16 != 0;
    }
  }
  return false;
}

// The pairs checked are [0, offsets[G]) clamped into [0, capacity]: the offsets pass normally
// ran first, but when take_device_error defers (graph capture) this pass runs regardless and
// must still stay inside x_row / y_row.
__global__ void __launch_bounds__(kCheckThreads)
    grouped_linear_check_kernel(GroupedLinearParams p, GlCheck check, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ int32_t first;
  if (threadIdx.x == 0) first = INT32_MAX;
  __syncthreads();
  const int32_t pairs = min(max(p.offsets[p.num_groups], 0), p.capacity);
  const int32_t n = check == GlCheck::kOffsets   ? p.num_groups + 1
                    : check == GlCheck::kWeights ? p.num_groups
                                                 : pairs;
  int32_t value;
  for (int64_t i = threadIdx.x; i < n; i += kCheckThreads)
    if (gl_broken(p, check, static_cast<int32_t>(i), &value))
      atomicMin(&first, static_cast<int32_t>(i));
  __syncthreads();
  if (threadIdx.x == 0 && first != INT32_MAX) {
    gl_broken(p, check, first, &value);
    cuda::report_device_error(err, StatusCode::kOutOfRange, cuda::OpId::kModelOp, first, value);
  }
}

Status run_check(const GroupedLinearParams& p, GlCheck check, cuda::DeviceErrorWord* err,
                 const char* context) {
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(1), dim3(kCheckThreads), size_t(0), cuda::current_stream()},
      grouped_linear_check_kernel, p, check, err));
  return cuda::end_launch("grouped_linear_check", /*checked=*/true, context);
}

// Checked mode: offsets first (they bound the pair checks), then x_row, y_row and the weights.
Status check_device_data(const GroupedLinearParams& p) {
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::device_error_word());
  DSA_RETURN_IF_ERROR(run_check(p, GlCheck::kOffsets, err,
                                "grouped_linear: offsets[index] = value: offsets[0] must be 0, "
                                "non-decreasing, offsets[num_groups] <= capacity"));
  DSA_RETURN_IF_ERROR(run_check(p, GlCheck::kXRow, err,
                                "grouped_linear: x_row[index] = value: must be in [0, x_rows)"));
  DSA_RETURN_IF_ERROR(run_check(p, GlCheck::kYRow, err,
                                "grouped_linear: y_row[index] = value: must be in [0, y_rows)"));
  return run_check(
      p, GlCheck::kWeights, err,
      p.weights_fp8 != nullptr
          ? "grouped_linear: weights_fp8[index] of a group with pairs is null (value "
            "-1) or not 16-byte aligned (value = address % 16), or weight_scales[index] "
            "is null (value -2)"
          : "grouped_linear: weights[index] of a group with pairs is null (value -1) "
            "or not 16-byte aligned (value = address % 16)");
}

}  // namespace

Status moe_group_cuda(const MoeGroupParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_experts > kMaxExperts) {
    return unimplemented("moe_group_cuda: num_experts = " + std::to_string(p.num_experts) +
                         ": at most " + std::to_string(kMaxExperts) + " (shared-memory counters)");
  }
  const bool checked = checked_mode();
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(1), dim3(kGroupThreads), size_t(group_smem_bytes(p.num_experts)),
                        cuda::current_stream()},
      moe_group_kernel, p, err));
  return cuda::end_launch("moe_group", checked,
                          "moe_group: expert_ids[index] = value: must be in [-1, num_experts)");
}

Status grouped_linear_cuda(const GroupedLinearParams& p) {
  namespace gl = grouped_linear_detail;
  DSA_RETURN_IF_ERROR(validate(p));
  DSA_RETURN_IF_ERROR(cuda::require_aligned("grouped_linear", "x", p.x, 16));  // cp.async
  const int64_t m_slots = (int64_t{p.capacity} + gl::kBM - 1) / gl::kBM + p.num_groups;
  const int64_t n_tiles = (int64_t{p.out_features} + gl::kBN - 1) / gl::kBN;
  if (m_slots > INT32_MAX || n_tiles > 65535) {
    return invalid_argument("grouped_linear_cuda: capacity = " + std::to_string(p.capacity) +
                            ", num_groups = " + std::to_string(p.num_groups) + ", out_features = " +
                            std::to_string(p.out_features) + ": the grid exceeds the CUDA limits");
  }
  if (checked_mode()) {
    DSA_RETURN_IF_ERROR(check_device_data(p));
    if (p.y_b != nullptr) DSA_RETURN_IF_ERROR(check_device_data(second_projection(p)));
  }
  if (p.weights_fp8 != nullptr) {
    if (checked_mode()) {
      DSA_RETURN_IF_ERROR(grouped_fp8::check_device_values(p));
      if (p.y_b != nullptr) {
        DSA_RETURN_IF_ERROR(grouped_fp8::check_device_values(second_projection(p)));
      }
    }
    return grouped_fp8::launch(p);
  }
  const bool vec_out = p.out_features % gl::kVec == 0 && cuda::is_aligned(p.y, 16);
  const dim3 grid(static_cast<unsigned>(m_slots), static_cast<unsigned>(n_tiles));
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(grid), dim3(gl::kThreads), size_t(0), cuda::current_stream()},
      gl::grouped_linear_kernel, p, vec_out));
  return cuda::launch_error("grouped_linear");
}

}  // namespace dsa::kernels
