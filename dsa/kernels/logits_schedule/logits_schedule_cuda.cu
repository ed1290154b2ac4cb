// CUDA builder of the paged-logits schedule (SPEC.md §3c), run on the device once per forward
// (inside the CUDA graph in graph modes) from the same row_len buffer the logits kernel reads.
// Class E: L_b, seg_b and start_i are the DSA_HD formulas of logits_schedule_math.h that the CPU
// builder runs; T_seg, the prefix sums and len_hash are integer sums (exact in any order, and
// T_seg cannot overflow: the host validates B_pad ceil(W P / S_tok) <= INT32_MAX).
#include <cstdint>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// One CTA writes the whole schedule: [10 + 2(G + 1)] int32 words from row_len [B_pad n].
//  Phase 1: T_seg = sum of seg_b and len_hash = sum of uint32(row_len[r]) (2r + 1), thread t
//           taking requests t, t + 256, ...; block reductions; thread 0 writes the header.
//  Phase 2: entries with start_i = T_seg are (B_pad, 0). The others are resolved chunk by chunk
//           of 256 requests: a block exclusive scan (plus the carry of earlier chunks) puts
//           pre_b in shared memory, and each start_i falling in [pre_first, pre_last) of the chunk
//           binary-searches the largest b with pre_b <= start_i, giving (b, start_i - pre_b).
//  Shared memory is fixed (257 prefix words), so any B_pad works; B_pad <= 256 is one chunk.
__global__ void __launch_bounds__(kThreads)
    logits_schedule_kernel(const int32_t* __restrict__ row_len, int32_t batch_pad, int32_t n,
                           int32_t G, int32_t W, int32_t P, int32_t* __restrict__ schedule) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  __shared__ int32_t s_pre[kThreads + 1];
  __shared__ int32_t s_seg_warp[kWarps];
  __shared__ uint32_t s_hash_warp[kWarps];
  __shared__ int32_t s_scan_warp[kWarps];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // ---- Phase 1: T_seg and len_hash ----------------------------------------------------------
  int32_t seg_sum = 0;
  uint32_t hash = 0;
  for (int64_t b = tid; b < batch_pad; b += kThreads) {
    seg_sum += schedule_request_segments(row_len, int32_t(b), n, W, P);
    for (int32_t j = 0; j < n; ++j) {
      const int64_t r = b * n + j;
      hash += static_cast<uint32_t>(row_len[r]) * static_cast<uint32_t>(2 * r + 1);
    }
  }
  seg_sum = warp_sum(seg_sum);
  hash = warp_sum(hash);
  if (lane == 0) {
    s_seg_warp[warp] = seg_sum;
    s_hash_warp[warp] = hash;
  }
  __syncthreads();
  int32_t total = 0;
  uint32_t len_hash = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    total += s_seg_warp[w];
    len_hash += s_hash_warp[w];
  }
  if (tid == 0) {
    schedule[kScheduleWordMagic] = kScheduleMagic;
    schedule[kScheduleWordVersion] = kScheduleVersion;
    schedule[kScheduleWordBatchPad] = batch_pad;
    schedule[kScheduleWordRowsPerRequest] = n;
    schedule[kScheduleWordNumConsumers] = G;
    schedule[kScheduleWordSplitTokens] = kScheduleSplitTokens;
    schedule[kScheduleWordPageTableWidth] = W;
    schedule[kScheduleWordTotalSegments] = total;
    schedule[kScheduleWordLenHash] = static_cast<int32_t>(len_hash);
    schedule[kScheduleWordReserved] = 0;
  }
  int32_t* entries = schedule + kScheduleHeaderWords;

  // ---- Phase 2a: consumers starting at T_seg (empty tails; all of them when T_seg = 0) -------
  for (int32_t i = tid; i <= G; i += kThreads) {
    if (schedule_start(i, G, total) == total) {
      entries[2 * int64_t{i}] = batch_pad;
      entries[2 * int64_t{i} + 1] = 0;
    }
  }

  // ---- Phase 2b: the other entries, one chunk of kThreads requests at a time -----------------
  int32_t carry = 0;  // pre_b of the chunk's first request
  for (int64_t base = 0; base < batch_pad; base += kThreads) {
    const int64_t b = base + tid;
    const int32_t seg = b < batch_pad ? schedule_request_segments(row_len, int32_t(b), n, W, P) : 0;
    int32_t inclusive = seg;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int32_t v = __shfl_up_sync(kFullMask, inclusive, offset);
      if (lane >= offset) inclusive += v;
    }
    if (lane == 31) s_scan_warp[warp] = inclusive;
    __syncthreads();
    int32_t warp_prefix = 0, chunk_total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int32_t v = s_scan_warp[w];
      warp_prefix += w < warp ? v : 0;
      chunk_total += v;
    }
    s_pre[tid] = carry + warp_prefix + inclusive - seg;
    if (tid == 0) s_pre[kThreads] = carry + chunk_total;
    __syncthreads();

    const int32_t chunk_n = batch_pad - base < kThreads ? int32_t(batch_pad - base) : kThreads;
    const int32_t first = s_pre[0], last = s_pre[kThreads];  // [pre_base, pre_{base + chunk_n})
    for (int32_t i = tid; i <= G; i += kThreads) {
      const int32_t start = schedule_start(i, G, total);
      if (start < first || start >= last) continue;
      int32_t lo = 0, hi = chunk_n;  // largest j < chunk_n with s_pre[j] <= start
      while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (s_pre[mid] <= start) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      entries[2 * int64_t{i}] = int32_t(base) + lo - 1;
      entries[2 * int64_t{i} + 1] = start - s_pre[lo - 1];
    }
    carry += chunk_total;
    __syncthreads();  // s_pre and s_scan_warp are rewritten by the next chunk
  }
}

}  // namespace

Status build_logits_schedule_cuda(const LogitsScheduleParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(1), dim3(kThreads), size_t(0), cuda::current_stream()},
                   logits_schedule_kernel, p.row_len, p.batch_pad, p.rows_per_request,
                   p.num_consumers, p.page_table_width, p.page_size, p.schedule));
  return cuda::launch_error("logits_schedule_kernel");
}

}  // namespace dsa::kernels
