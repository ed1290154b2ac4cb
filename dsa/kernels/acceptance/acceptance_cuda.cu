// Acceptance of top-1 drafts (SPEC.md §6.2, §6.3) on the GPU:
//  1. sample: grid (d + 1, B), one CTA per verify row; CTA (j, b) samples row b (d + 1) + j at
//     position first_position[b] (+ shift_accepted[b]) + j with request b's params, using the
//     sampling op's row sampler (kernels/common/sample_row.cuh). Every row is sampled, also those
//     past the first mismatch: the rows run in parallel, and which are needed is known only after.
//  2. accept: a (the leading y_j == g_{j+1}, y_j a token), emitted[b, 0 : a + 1] = y_0..y_a
//     (g_1..g_a, since they equal them, then y_a) and -1 after. Every CTA writes its y_j to
//     emitted; up to kAcceptClusterMaxDrafts the d + 1 CTAs of a request are one cluster, and
//     after the cluster barrier (release / acquire at cluster scope) the first CTA counts over the
//     request's entries in place, in the same launch. Above it a second launch, one thread per
//     request, counts.
// At d = 0 (plain sampling, one row per request, nothing to count) the sample kernel writes
// accepted[b] = 0 and y_0 itself: one kernel per call. With `greedy` (the MTP chain's drafts, and
// plain decoding or the verify when every request is greedy) a kernel of the argmax alone takes
// step 1's place, in the same grid, clusters and count launch.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "dsa/core/checked_mode.h"
#include "dsa/core/env_switch.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/kernels/common/sample_row.cuh"

namespace dsa::kernels {

namespace {

namespace sd = sampling_device;

constexpr int kAcceptThreads = 128;

// Request b's drafts, as request_draft reads them (acceptance.h).
struct RequestDrafts {
  const int32_t* drafts;  // [d]
  const int32_t* index;   // [d] or null
  const int32_t* slots;
  int32_t bound;
};

__device__ RequestDrafts request_drafts(const AcceptanceParams& p, int32_t b) {
  const int64_t e = int64_t{b} * p.drafts_per_request;
  return {p.drafts + e, p.draft_index != nullptr ? p.draft_index + e : nullptr, p.draft_slots,
          p.draft_index_bound};
}

// Counts a request's accepted drafts from its tokens y = out[0..d] in place: accepted = a, out[j]
// = -1 past a. A draft index outside [-1, bound) rejects the request (a = 0, every entry -1),
// reported as value 6. Not inlined, its arguments plain values: the cluster kernel's one counting
// thread then needs no registers held over the sampling, which fills its 64 per thread.
__device__ __noinline__ void count_request(RequestDrafts g, int32_t d, int32_t* out,
                                           int32_t* accepted, int32_t b,
                                           cuda::DeviceErrorWord* err) {
  bool bad_index = false;
  for (int32_t j = 0; g.index != nullptr && j < d; ++j) {
    bad_index = bad_index || !draft_index_ok(g.index[j], g.bound);
  }
  if (bad_index) {
    cuda::report_device_error(err, StatusCode::kInvalidArgument, cuda::OpId::kAcceptance, b, 6);
    *accepted = 0;
    for (int32_t j = 0; j <= d; ++j) out[j] = -1;
    return;
  }
  int32_t a = 0;
  while (a < d && out[a] != -1 && out[a] == request_draft(g.drafts, g.index, g.slots, a)) ++a;
  *accepted = a;
  for (int32_t j = a + 1; j <= d; ++j) out[j] = -1;
}

// Step 2's writes of CTA (j, b) with its token y (every thread holds it): y_j, at d = 0 also a = 0
// (no count at d = 0: header), and with kCluster the count after the cluster barrier. Every CTA of
// a cluster must reach it (no early return before).
template <bool kCluster>
__device__ __forceinline__ void write_and_count(const AcceptanceParams& p, int64_t row, int32_t y,
                                                cuda::DeviceErrorWord* err) {
  if (threadIdx.x == 0) {
    p.emitted[row] = y;
    if (p.drafts_per_request == 0) p.accepted[blockIdx.y] = 0;
  }
  if constexpr (kCluster) {
    // The barrier's release / acquire at cluster scope: every y_j of the request is visible to
    // the first CTA, which counts over them in place.
    cooperative_groups::this_cluster().sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      const int32_t b = static_cast<int32_t>(blockIdx.y);  // read again: nothing held over the scan
      count_request(request_drafts(p, b), p.drafts_per_request,
                    p.emitted + int64_t{b} * (p.drafts_per_request + 1), p.accepted + b, b, err);
    }
  }
}

// Request b's params are checked by every one of its CTAs (the same verdict); only row 0 reports,
// so the error word names the request once. kCluster: the request's CTAs are one cluster and the
// first counts (header); every CTA reaches the cluster barrier (no early return).
template <bool kCluster>
__global__ void __launch_bounds__(sd::kThreads)
    acceptance_sample_kernel(AcceptanceParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ sd::Smem sm;
  const int32_t j = static_cast<int32_t>(blockIdx.x), b = static_cast<int32_t>(blockIdx.y);
  const int32_t d = p.drafts_per_request;
  const int64_t row = int64_t{b} * (d + 1) + j;
  const float* x = p.logits + row * (p.row_stride != 0 ? p.row_stride : p.vocab);
  // The row's head before the params: at temperature 0 the two loads overlap (sample_row.cuh).
  const sd::RowHead head = sd::load_row_head(x, p.vocab);
  const int32_t shift = p.shift_accepted != nullptr ? p.shift_accepted[b] : 0;
  const int64_t first = int64_t{p.first_position[b]} + shift;
  const bool shift_ok = shift >= 0 && shift <= d;
  const bool positions_ok = first >= 0 && first + d <= INT32_MAX;
  const sd::RowParams rp{p.temperature[b], p.top_p[b], p.top_k[b], p.seed[b],
                         positions_ok ? static_cast<int32_t>(first + j) : -1};
  int32_t bad = sd::row_param_error(rp);  // 4 when the positions leave int32
  // The reference's order: the sampling params (1-3) first, then the shift (5), whose wrong value
  // also moved the positions (4). Block-uniform, as every verdict here.
  if (!shift_ok && (bad == 0 || bad == 4)) bad = 5;
  int32_t y = -1;
  if (bad != 0) {
    if (threadIdx.x == 0 && j == 0) {
      cuda::report_device_error(err, StatusCode::kInvalidArgument, cuda::OpId::kAcceptance, b, bad);
    }
  } else {
    y = sd::sample_row(x, p.vocab, rp, sm, &head);
  }
  write_and_count<kCluster>(p, row, y, err);
}

// `greedy`: CTA (j, b) takes row b (d + 1) + j's argmax, then step 2 as the sample kernel (d = 0,
// the MTP chain's drafts and plain decoding: one row per request, a = 0). No params read, and
// only the argmax's scratch in shared memory: with the sampler's 34 KB (acceptance_sample_kernel)
// a one-CTA launch between two forwards spent ~6 of its ~10 us outside the SM's active cycles
// (ncu on the H100, docs/gpu-runs/2026-12-07-s49 call 4).
template <bool kCluster>
__global__ void __launch_bounds__(sd::kThreads)
    acceptance_greedy_kernel(AcceptanceParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ sd::ArgmaxSmem sm;
  const int64_t row = int64_t{blockIdx.y} * (p.drafts_per_request + 1) + blockIdx.x;
  const float* x = p.logits + row * (p.row_stride != 0 ? p.row_stride : p.vocab);
  const sd::RowHead head = sd::load_row_head(x, p.vocab);
  const int32_t y = sd::greedy_row(x, p.vocab, sm, &head);
  write_and_count<kCluster>(p, row, y, err);
}

// DSA_ACCEPT_GREEDY=generic runs `greedy` calls that carry their sampling params (the caller
// sets them to temperature 0) on the sampling kernel, for measuring the two against each other.
// Read at each call, as DSA_ACCEPT_CLUSTER below, so a test can switch it (a getenv beside a
// launch).
StatusOr<bool> greedy_kernel_enabled() {
  DSA_ASSIGN_OR_RETURN(const std::string_view form,
                       env_choice("DSA_ACCEPT_GREEDY", {"own", "generic"}, "own"));
  return form == "own";
}

__global__ void acceptance_count_kernel(AcceptanceParams p, cuda::DeviceErrorWord* err) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t b = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= p.requests) return;
  count_request(request_drafts(p, b), p.drafts_per_request,
                p.emitted + int64_t{b} * (p.drafts_per_request + 1), p.accepted + b, b, err);
}

}  // namespace

Status accept_drafts_cuda(const AcceptanceParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.requests == 0) return ok_status();
  // grid.y holds B, at most 65535 requests per launch: far above any batch bucket.
  if (p.requests > 65535) {
    return invalid_argument("acceptance: requests = " + std::to_string(p.requests) +
                            ": the CUDA backend takes at most 65535 per call");
  }
  // DSA_ACCEPT_CLUSTER=off counts in a second launch at every d, for measuring the cluster form
  // against it. On the H100 (docs/gpu-runs/2026-12-07-s48, calls 5 and 6) neither wins clearly:
  // after the cluster launch the next sampling launch (the draft extend's greedy draft, ~90 us
  // later) runs 8.5 us instead of 4.9, which the count launch gives back at the verify; the d = 3
  // device step at batch 1 was ~1% shorter without clusters, but one launch more per step costs
  // the host, and batch 8 and 32 were even.
  DSA_ASSIGN_OR_RETURN(const std::string_view cluster_form,
                       env_choice("DSA_ACCEPT_CLUSTER", {"on", "off"}, "on"));
  const bool checked = checked_mode();
  // A greedy call runs the argmax kernel, unless the switch asks for the sampling kernel and the
  // call carries the params that one reads (they may be null). Only greedy calls read the switch.
  bool own_greedy = false;
  if (p.greedy) {
    DSA_ASSIGN_OR_RETURN(own_greedy, greedy_kernel_enabled());
    own_greedy = own_greedy || p.temperature == nullptr || p.top_p == nullptr ||
                 p.top_k == nullptr || p.seed == nullptr || p.first_position == nullptr;
  }
  DSA_ASSIGN_OR_RETURN(cuda::DeviceErrorWord * err, cuda::error_word_if(checked));
  const int32_t d = p.drafts_per_request;
  const dim3 grid(static_cast<unsigned>(d + 1), static_cast<unsigned>(p.requests));
  const bool cluster = d >= 1 && d <= kAcceptClusterMaxDrafts && cluster_form == "on";
  using RowKernel = void (*)(AcceptanceParams, cuda::DeviceErrorWord*);
  const RowKernel row_kernel =
      own_greedy ? (cluster ? acceptance_greedy_kernel<true> : acceptance_greedy_kernel<false>)
                 : (cluster ? acceptance_sample_kernel<true> : acceptance_sample_kernel<false>);
  const char* row_name = own_greedy ? "acceptance_greedy_kernel" : "acceptance_sample_kernel";
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{grid, dim3(sd::kThreads), size_t(0), cuda::current_stream(),
                                     cluster ? static_cast<unsigned>(d + 1) : 1u},
                   row_kernel, p, err));
  if (d == 0 || cluster) return cuda::end_launch(row_name, checked, "accept_drafts_cuda");
  DSA_RETURN_IF_ERROR(cuda::launch_error(row_name));
  const unsigned blocks = static_cast<unsigned>((p.requests + kAcceptThreads - 1) / kAcceptThreads);
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(blocks), dim3(kAcceptThreads), size_t(0), cuda::current_stream()},
      acceptance_count_kernel, p, err));
  return cuda::end_launch("acceptance_count_kernel", checked, "accept_drafts_cuda");
}

}  // namespace dsa::kernels
